#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (unit, data, and end-to-end tests under mpirun).
# Usage: bash launch/run_tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
cd build
ctest --output-on-failure -j"$(nproc)"
