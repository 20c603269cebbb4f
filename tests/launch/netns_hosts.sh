# Sourced, not run: "hosts" on this machine made of network namespaces (root only), as the multi-host
# test (tests/launch/three_hosts.sh) and benchmark (bench/two_hosts.sh) use them. Host i is namespace
# <prefix><i> with address <net>.i/24 on a bridge that lives in namespace <prefix>br; each process started
# there gets its own hostname (host<i>), or Open MPI's shared-memory files of the "hosts" collide.
#   netns_hosts_up PREFIX NET COUNT SLOTS DIR   makes them, writes DIR/agent (mpirun's launch agent in
#                                               place of ssh: it enters the host's namespace) and
#                                               DIR/hosts (a hostfile, SLOTS ranks a host)
#   netns_hosts_down PREFIX COUNT               kills what runs in them and removes them

netns_hosts_down() {
  local prefix=$1 count=$2 ns pids
  for ns in $(seq -f "$prefix%g" 1 "$count") "${prefix}br"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  return 0
}

netns_hosts_up() {
  local prefix=$1 net=$2 count=$3 slots=$4 dir=$5 i
  netns_hosts_down "$prefix" "$count"
  ip netns add "${prefix}br"
  ip netns exec "${prefix}br" ip link add br0 type bridge
  ip netns exec "${prefix}br" ip link set br0 up
  : > "$dir/hosts"
  for i in $(seq 1 "$count"); do
    ip netns add "$prefix$i"
    ip link add "veth$i" netns "$prefix$i" type veth peer name "port$i" netns "${prefix}br"
    ip netns exec "${prefix}br" ip link set "port$i" master br0 up
    ip netns exec "$prefix$i" ip addr add "$net.$i/24" dev "veth$i"
    ip netns exec "$prefix$i" ip link set "veth$i" up
    ip netns exec "$prefix$i" ip link set lo up
    echo "$net.$i slots=$slots" >> "$dir/hosts"
  done
  cat > "$dir/agent" <<AGENT
#!/usr/bin/env bash
host=\$1; shift
exec ip netns exec "$prefix\${host##*.}" unshare --uts sh -c 'hostname "\$0"; exec sh -c "\$*"' "host\${host##*.}" "\$@"
AGENT
  chmod +x "$dir/agent"
}
