# Included by the top CMakeLists.txt when DDL_SANITIZE is set, before any target is defined: every ddl
# library, program and test is compiled with the sanitizer named (tests/sanitizers/run_sanitizers.sh).
#   address: AddressSanitizer and UndefinedBehaviorSanitizer together (one build, one run)
#   thread:  ThreadSanitizer (it cannot be combined with AddressSanitizer)
# -O1 keeps the run near a plain build's speed while leaving stacks readable; UBSan findings stop the
# program instead of scrolling by, so a test fails on them.
if(DDL_SANITIZE STREQUAL "address")
  set(ddl_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined)
elseif(DDL_SANITIZE STREQUAL "thread")
  set(ddl_sanitize_flags -fsanitize=thread)
else()
  message(FATAL_ERROR "DDL_SANITIZE=${DDL_SANITIZE}: give address (ASan + UBSan) or thread (TSan)")
endif()
add_compile_options(-O1 -g1 -fno-omit-frame-pointer ${ddl_sanitize_flags})
add_link_options(${ddl_sanitize_flags})
