#!/usr/bin/env bash
# Builds ddl with a sanitizer in its own folder and runs tests there; any sanitizer report fails the run,
# even one from a program that a test expects to fail (reports go to files, not to the exit code).
#   bash tests/sanitizers/run_sanitizers.sh address   ASan + UBSan, build-asan/: the suite but for the tests
#                                                     that make root file systems, Docker, Slurm or fuzz builds,
#                                                     with a sample of the end-to-end tests
#                                                     (tests/launch/end_to_end_sample.sh)
#   bash tests/sanitizers/run_sanitizers.sh thread    TSan, build-tsan/: the tests with threads of ddl's own
#                                                     (loader, communication, watcher, signal handling)
#   more arguments go to ctest (e.g. -R Loader); --build-only first builds and stops;
#   DDL_SANITIZE_BUILD=DIR sets the build folder
# Exit 77 (skipped) when the compiler has no such sanitizer runtime.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:-}
shift || true
case "$mode" in
  address)
    build=${DDL_SANITIZE_BUILD:-$root/build-asan}
    targets=(core_tests data_tests models_tests comm_unit_tests comm_tests launch_tests launch_unit_tests ddl_train
             ddl_data)
    # Checkpoint.EveryDamagedByte...: 10,000 loads of damaged checkpoints, which fuzz_parsers does under ASan.
    # The model zoo's steps of whole networks at their published sizes and its loss-falls runs: their time
    # is oneDNN's (not instrumented), and every layer they use is in the smaller tests here.
    # DatasetWriter.AFullDisk...: runs in a process of its own below.
    gtest_skip="Checkpoint.EveryDamagedByte*:Torchvision/PublishedSize.*:Cifar/SmallVariant.*:DatasetWriter.AFullDisk*"
    probe_flags=(-fsanitize=address,undefined) ;;
  thread)
    # One end-to-end test for each thread of ddl's own: the loader's and the gradient reducer's (ranks with
    # buckets), the hang detector's, the stop-signal waiter's, and a rank that fails while they run.
    build=${DDL_SANITIZE_BUILD:-$root/build-tsan}
    targets=(data_tests comm_unit_tests comm_tests launch_tests launch_unit_tests ddl_train ddl_data)
    select=(-R "LoaderTest|WaitLimits|StopSignals|comm_allreduce_[23]_ranks|DdlTrain\.(RanksMatchOneRankWithTheGlobalBatch|AStoppedRankIsNamedWithinTheTimeout|SigtermStopsEveryRank|ARankFailingDuringTrainingStopsTheJob)")
    probe_flags=(-fsanitize=thread) ;;
  *) echo "run_sanitizers.sh: give address or thread" >&2; exit 2 ;;
esac
build_only=""
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
[ $# -eq 0 ] || select=("$@")  # address without arguments: the runs below

work=$(mktemp -d /tmp/ddl-sanitize-XXXXXX)
# The test programs' shards run in the background: they end with the script, whatever ends it.
trap 'jobs -p | xargs -r kill 2> /dev/null; rm -rf "$work"' EXIT
# Built and run: a runtime may build but not run here (TSan under a large vm.mmap_rnd_bits, LSan without
# ptrace).
if ! printf 'int main() { return 0; }\n' | c++ -x c++ "${probe_flags[@]}" - -o "$work/probe" 2> "$work/probe.txt" ||
   ! "$work/probe" 2>> "$work/probe.txt"; then
  echo "run_sanitizers: the compiler has no $mode sanitizer runtime that runs here: skipped"
  head -5 "$work/probe.txt"
  exit 77
fi

start=$(date +%s)
# A unity build (8 sources a compilation): these builds are made once and run, and most of a source's
# compile time is its headers (oneDNN's, Boost's, GoogleTest's): the ASan build took 385 s instead of 469.
# The host's Release build stays one source a compilation, so a missing include still fails it.
cmake -S "$root" -B "$build" -DDDL_SANITIZE="$mode" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_UNITY_BUILD=ON > "$work/cmake.txt" ||
  { cat "$work/cmake.txt"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" > "$work/build.txt" 2>&1 ||
  { tail -40 "$work/build.txt"; exit 1; }
echo "run_sanitizers: $mode build in $(($(date +%s) - start)) s"
[ -z "$build_only" ] || exit 0

reports=$build/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
supp=$root/tests/sanitizers
# Each process writes its reports to reports/<tool>.<pid>; a report fails the run whatever the test said.
# Full stacks for allocations (fast_unwind_on_malloc=0): frame pointers stop at Open MPI's code, which has
# none, and only a full stack reaches the Open MPI library that lsan.supp names.
export ASAN_OPTIONS="log_path=$reports/asan:detect_stack_use_after_return=1:check_initialization_order=1:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
# report_thread_leaks=0: a rank that fails during training ends the job at once (abort_all_ranks), without
# unwinding, since unwinding could wait forever for a peer; its finished loader thread is then never
# joined, which at exit holds nothing. A race, a deadlock or misuse of a mutex is still reported.
export TSAN_OPTIONS="log_path=$reports/tsan:suppressions=$supp/tsan.supp:print_suppressions=0:second_deadlock_stack=1:report_thread_leaks=0"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_smsc=${OMPI_MCA_smsc:-^cma}
code=0
if [ "$mode" = address ] && [ $# -eq 0 ]; then
  # The in-process tests with leak checks: each test program whole, in two shards side by side (gtest's
  # sharding), not one process a test as ctest starts them. LeakSanitizer's scan at each process's exit
  # costs 1.5-3 s here (mostly unmapping, whose TLB flushes are slow in a VM): over 220 tests that was most
  # of this part's time. Every layer and model, the pool, the loader, the checkpoints and the communicator
  # are tested in-process, so that is where ddl's own allocations are checked for leaks.
  for program in core_tests data_tests models_tests comm_unit_tests launch_unit_tests; do
    pids=()
    for shard in 0 1; do
      (cd "$build/tests" && GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$shard timeout 1500 "./$program" \
         --gtest_filter="-$gtest_skip") > "$work/$program.$shard.txt" 2>&1 &
      pids+=($!)
    done
    for shard in 0 1; do
      if wait "${pids[shard]}"; then
        { grep -h "^\[==========\].* ran\|^\[  PASSED" "$work/$program.$shard.txt" || true; } | tr '\n' ' ' |
          sed "s/^/$program shard $shard: /"
        echo
      else
        code=1
        echo "$program shard $shard FAILED:"
        { grep -h -B2 -A20 "FAILED\|ERROR\|Sanitizer" "$work/$program.$shard.txt" || tail -20 "$work/$program.$shard.txt"; } |
          tail -60
      fi
    done
  done
  # It turns HDF5's clean-up at exit off, which only works before HDF5's first use in the process: after the
  # other tests, HDF5 1.10 (Debian 12) crashed at exit closing the file whose flush failed.
  (cd "$build/tests" && ./data_tests --gtest_filter='DatasetWriter.AFullDisk*') > "$work/full_disk.txt" 2>&1 ||
    { code=1; echo "data_tests DatasetWriter.AFullDisk... FAILED:"; tail -20 "$work/full_disk.txt"; }
  # Under mpirun (with leak checks), then the sample of end-to-end tests without them: the leaks of
  # ddl_train, ddl_eval and ddl_predict's own code (launch/) are then not looked for, and these tests start
  # hundreds of ranks and tools (BadInputEndsWithOneClearLine took 80 s with leak checks, 22 without).
  source "$root/tests/launch/end_to_end_sample.sh"
  (cd "$build" && ctest --output-on-failure -j"$(nproc)" -R "^comm_allreduce_") > "$work/ctest.txt" 2>&1 || code=1
  (cd "$build" && ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest --output-on-failure -j"$(nproc)" \
     -R "$end_to_end_sample") >> "$work/ctest.txt" 2>&1 || code=1
else
  (cd "$build" && ctest --output-on-failure -j"$(nproc)" "${select[@]}") > "$work/ctest.txt" 2>&1 || code=1
fi
sed -n '/tests passed/,/^Total Test time/p' "$work/ctest.txt"
[ "$code" -eq 0 ] || { grep -B2 -A40 "\*\*\*Failed\|\*\*\*Timeout\|\*\*\*Exception" "$work/ctest.txt" | tail -150 || true; }
found=("$reports"/*)
if [ -e "${found[0]}" ]; then
  code=1
  echo "run_sanitizers: ${#found[@]} $mode sanitizer report(s) in $reports; the first:"
  head -60 "${found[0]}"
fi
echo "run_sanitizers: $mode: $(($(date +%s) - start)) s in all"
[ "$code" -eq 0 ] && echo "run_sanitizers: $mode: clean"
exit "$code"
