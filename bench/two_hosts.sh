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
work=$(mktemp -d)
cleanup() {
  for ns in ddl_h1 ddl_h2 ddl_br; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for ns in ddl_h1 ddl_h2 ddl_br; do ip netns del "$ns" 2>/dev/null || true; done
ip netns add ddl_br
ip netns exec ddl_br ip link add br0 type bridge
ip netns exec ddl_br ip link set br0 up
for i in 1 2; do
  ip netns add "ddl_h$i"
  ip link add "veth$i" netns "ddl_h$i" type veth peer name "port$i" netns ddl_br
  ip netns exec ddl_br ip link set "port$i" master br0 up
  ip netns exec "ddl_h$i" ip addr add "10.77.0.$i/24" dev "veth$i"
  ip netns exec "ddl_h$i" ip link set "veth$i" up
  ip netns exec "ddl_h$i" ip link set lo up
done
# The launch agent: "agent HOST COMMAND..." runs COMMAND in the namespace that owns HOST's address.
cat > "$work/agent" <<'AGENT'
#!/usr/bin/env bash
host=$1; shift
ns=ddl_h${host##*.}
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0"; exec sh -c "$*"' "host${host##*.}" "$@"
AGENT
chmod +x "$work/agent"
printf '10.77.0.1 slots=%s\n10.77.0.2 slots=%s\n' "$per_host" "$per_host" > "$work/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec ddl_h1 unshare --uts sh -c 'hostname host1; exec "$@"' sh \
  mpirun --oversubscribe -np $((2 * per_host)) --hostfile "$work/hosts" \
    --mca plm_rsh_agent "$work/agent" --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    --mca btl self,vader,tcp ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    "$@"
