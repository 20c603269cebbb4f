#!/usr/bin/env bash
# Rewrites the seed corpora in tests/fuzz/corpus/ with the generator of the fuzz build (make_seeds.cpp):
# run after a change to a file format, then commit the files. (corpus/dataset and corpus/checkpoint hold
# inputs libFuzzer found, merged with: fuzz_<target> -merge=1 corpus/<target> NEW_INPUTS_DIR.)
#   bash tests/fuzz/make_seeds.sh      (builds build-fuzz/ first, as run_fuzzers.sh does)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DDL_FUZZ_BUILD:-$root/build-fuzz}
cmake -S "$root" -B "$build" -DDDL_FUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ > /dev/null
cmake --build "$build" -j2 --target fuzz_make_seeds
for t in dataset_bytes checkpoint_bytes image_folder cifar_binary config_file onnx_graph; do rm -rf "$root/tests/fuzz/corpus/$t"; done
ASAN_OPTIONS=detect_leaks=0 "$build/tests/fuzz/fuzz_make_seeds" "$root/tests/fuzz/corpus"
find "$root/tests/fuzz/corpus" -type f | sort | xargs ls -l | awk '{print $5, $9}'
