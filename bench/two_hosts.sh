#!/usr/bin/env bash
# Runs a command line under mpirun across 2 "hosts" made on this machine with network namespaces (root
# only): h1 and h2, each with its own address on a private 10.77.0.0/24 bridge (the bridge lives in a third
# namespace) and its own hostname, so Open MPI talks TCP between them as between two machines. mpirun is
# started in h1 and reaches h2 through a launch agent that enters the namespace instead of using ssh.
#   bash bench/two_hosts.sh RANKS_PER_HOST PROGRAM [ARGS...]
# e.g. bash bench/two_hosts.sh 1 build/bench/allreduce_bandwidth 64
set -euo pipefail
cd "$(dirname "$0")/.."
per_host=$1
shift
source tests/launch/netns_hosts.sh
work=$(mktemp -d)
cleanup() {
  netns_hosts_down ddl_h 2
  rm -rf "$work"
}
trap cleanup EXIT
netns_hosts_up ddl_h 10.77.0 2 "$per_host" "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec ddl_h1 unshare --uts sh -c 'hostname host1; exec "$@"' sh \
  mpirun --oversubscribe -np $((2 * per_host)) --hostfile "$work/hosts" \
    --mca plm_rsh_agent "$work/agent" --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    --mca btl self,vader,tcp ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    "$@"
