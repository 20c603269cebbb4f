#!/usr/bin/env bash
# Builds the fuzz targets (clang, libFuzzer, ASan + UBSan) in build-fuzz/, replays each target's past
# findings (tests/fuzz/findings/<target>/: every one must now end in success or an InputError), then runs it
# bounded from its seed corpus (tests/fuzz/corpus/<target>/). A crash, a sanitizer report, an exception other
# than InputError, a hang (-timeout) or an allocation over the limits fails the run; the input is kept in
# build-fuzz/artifacts/. Exit 77 (skipped) when clang or libFuzzer is missing.
#   bash tests/fuzz/run_fuzzers.sh [TARGET...]     (dataset checkpoint image_folder cifar_binary config_file onnx_graph
#                                                   graph_operators)
#   DDL_FUZZ_SECONDS=N  per target (default 20)    DDL_FUZZ_RUNS=N  inputs per target at most (default 20000)
#   DDL_FUZZ_BUILD=DIR  build folder (default <repository>/build-fuzz)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DDL_FUZZ_BUILD:-$root/build-fuzz}
seconds=${DDL_FUZZ_SECONDS:-20}
runs=${DDL_FUZZ_RUNS:-20000}
targets=(dataset checkpoint image_folder cifar_binary config_file onnx_graph graph_operators)
[ $# -eq 0 ] || targets=("$@")

work=$(mktemp -d /tmp/ddl-fuzz-XXXXXX)
# The files the targets write for each input, on tmpfs when there is one; gone at the end even after a finding.
DDL_FUZZ_SCRATCH=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo /tmp )/ddl-fuzz-XXXXXX")
export DDL_FUZZ_SCRATCH
# The targets fuzzing side by side (below) end with the script, before their folders go.
trap 'kill $(jobs -p) 2> /dev/null || true; wait; rm -rf "$work" "$DDL_FUZZ_SCRATCH"' EXIT
# libFuzzer ships with clang on Debian (libclang-rt-dev); a machine without them skips the test.
if ! command -v clang++ > /dev/null ||
   ! printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' |
     clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o "$work/probe" 2> "$work/probe.txt"; then
  echo "run_fuzzers: no clang++ with libFuzzer (install clang and libclang-rt-dev): skipped"
  sed 's/^/  /' "$work/probe.txt" 2> /dev/null | head -5 || true
  exit 77
fi

start=$(date +%s)
# A unity build, as the sanitizers' (tests/sanitizers/run_sanitizers.sh says why).
cmake -S "$root" -B "$build" -DDDL_FUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ > "$work/cmake.txt" || { cat "$work/cmake.txt"; exit 1; }
# At most 2 jobs: clang with ASan takes about 1 GB a job, and the suite runs beside it.
cmake --build "$build" -j"$(( $(nproc) < 2 ? $(nproc) : 2 ))" --target fuzz_targets > "$work/build.txt" 2>&1 ||
  { tail -40 "$work/build.txt"; exit 1; }
echo "run_fuzzers: built in $(($(date +%s) - start)) s"

artifacts=$build/artifacts
mkdir -p "$artifacts"
# Leaks are checked at exit of each input's parse (libFuzzer's -detect_leaks); HDF5 keeps some memory until
# its library closes, which ddl never does (h5::no_cleanup_at_exit), hence the suppressions file.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0}
# One target: its messages on stdout, its status as the function's.
fuzz_one() {
  local t=$1 exe findings seeds dict t0 inputs
  exe=$build/tests/fuzz/fuzz_$t
  [ -x "$exe" ] || { echo "run_fuzzers: no target $t"; return 1; }
  # Past findings first, each by name: one that fails again is named, not rediscovered.
  findings=("$root/tests/fuzz/findings/$t"/*)
  if [ -e "${findings[0]}" ] && ! "$exe" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$work/$t-" \
      "${findings[@]}" \
      > "$work/$t.findings.log" 2>&1; then
    echo "run_fuzzers: $t: FAILED: tests/fuzz/findings/$t/$(sed -n 's|^Running: .*/||p' "$work/$t.findings.log" | tail -1)" \
         "fails again (tests/fuzz/findings/README.md):"
    grep -v '^#\|^INFO:\|^ *$' "$work/$t.findings.log" | grep -v '^ *#[0-9]* 0x.* in fuzzer::' | tail -25
    return 1
  fi
  mkdir -p "$work/$t" || return 1  # new inputs go here, not into the repository's corpus
  seeds=()
  [ -d "$root/tests/fuzz/corpus/$t" ] && seeds=("$root/tests/fuzz/corpus/$t")
  dict=()
  [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
  t0=$(date +%s)
  # -rss_limit_mb / -malloc_limit_mb: an allocation sized by a file's claim rather than its contents shows
  # as an out-of-memory finding; -timeout: an input that takes longer is a hang.
  if "$exe" "$work/$t" "${seeds[@]}" "${dict[@]}" -runs="$runs" -max_total_time="$seconds" -timeout=20 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=16384 -print_final_stats=1 \
      -artifact_prefix="$artifacts/$t-" > "$work/$t.log" 2>&1; then
    inputs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log")
    echo "run_fuzzers: $t: $inputs inputs in $(($(date +%s) - t0)) s ($(ls "$work/$t" | wc -l) new in the corpus): ok"
  else
    echo "run_fuzzers: $t: FAILED after $(($(date +%s) - t0)) s; the input is in $artifacts/" \
         "(DDL_FUZZ_VERBOSE=1 $exe FILE replays it):"
    grep -v '^#\|^INFO:\|^ *$' "$work/$t.log" | grep -v '^ *#[0-9]* 0x.* in fuzzer::\|NEW_FUNC' | tail -40
    return 1
  fi
}

# The targets side by side, one a core (each fuzzes on one thread), their messages in the targets' order.
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  { if fuzz_one "$t" > "$work/$t.result" 2>&1; then echo 0; else echo 1; fi > "$work/$t.status"; } &
done
wait
code=0
for t in "${targets[@]}"; do
  cat "$work/$t.result"
  [ "$(cat "$work/$t.status")" = 0 ] || code=1
done
echo "run_fuzzers: $(($(date +%s) - start)) s in all"
exit "$code"
