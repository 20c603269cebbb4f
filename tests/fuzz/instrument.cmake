# Included by the top CMakeLists.txt when DDL_FUZZ is ON, before any target is defined: every ddl library is
# then compiled with libFuzzer's coverage and with AddressSanitizer and UndefinedBehaviorSanitizer, so a
# parser's memory error or undefined behaviour stops the fuzzer. libFuzzer is clang's: configure this build
# folder with clang (tests/fuzz/run_fuzzers.sh does).
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "DDL_FUZZ=ON needs clang (libFuzzer): cmake -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
endif()
# -O1 and line tables only: the fuzzing speed of -O2 and symbolized stacks at a shorter build; UBSan findings
# stop the run instead of scrolling by.
add_compile_options(-O1 -gline-tables-only -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
                    -fno-sanitize-recover=undefined)
add_link_options(-fsanitize=address,undefined)
