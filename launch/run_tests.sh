#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (unit, data, and end-to-end tests under mpirun).
# Usage: bash launch/run_tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The tests also signal ranks (pgrep), and run a real Slurm cluster and a docker-compose cluster on this
# machine (as root; skipped otherwise).
bash launch/setup.sh procps slurmctld slurmd slurm-client munge docker.io docker-compose debootstrap iproute2
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# In containers that forbid ptrace, Open MPI's shared-memory single-copy (CMA) fails; tests do not need it.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_smsc=${OMPI_MCA_smsc:-^cma}  # the same for Open MPI 5, where single copy is the smsc framework
cd build
ctest --output-on-failure -j"$(nproc)"
