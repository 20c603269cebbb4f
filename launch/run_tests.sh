#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (unit, data, and end-to-end tests under mpirun), then
# lists the slowest tests.
# Usage: bash launch/run_tests.sh [ctest options, e.g. -R Conv2d or -E docker]
#   DDL_TESTS_REQUIRE_ALL=1  fails when a test was skipped (CI: a skip there means a missing package)
set -euo pipefail
cd "$(dirname "$0")/.."
# The tests also signal ranks (pgrep), and run real Slurm clusters, a docker-compose cluster and bare
# Debian root file systems on this machine (as root; skipped otherwise).
bash launch/setup.sh --tests
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# In containers that forbid ptrace, Open MPI's shared-memory single-copy (CMA) fails; tests do not need it.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_smsc=${OMPI_MCA_smsc:-^cma}  # the same for Open MPI 5, where single copy is the smsc framework
log=build/Testing/run_tests.log
mkdir -p build/Testing
code=0
(cd build && ctest --output-on-failure -j"$(nproc)" "$@") 2>&1 | tee "$log" || code=$?
echo "slowest tests:"
sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .* \([0-9.]*\) sec$/\2 \1/p' "$log" | sort -rn |
  awk 'NR <= 12 {printf "  %8.1f s  %s\n", $1, $2}'
if [ "${DDL_TESTS_REQUIRE_ALL:-0}" = 1 ] && grep -q "\*\*\*Skipped\|\*\*\*Not Run" "$log"; then
  echo "run_tests: tests were skipped (DDL_TESTS_REQUIRE_ALL=1):"
  grep "\*\*\*Skipped\|\*\*\*Not Run" "$log"
  exit 1
fi
exit "$code"
