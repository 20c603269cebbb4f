#!/usr/bin/env bash
# Three "hosts" on this machine for the multi-host tests (root only): network namespaces ddl_t1..3 with
# addresses 10.78.0.1..3 on a bridge that lives in a fourth namespace, each process with its own hostname,
# so Open MPI's TCP transport runs between them as between machines. mpirun starts in ddl_t1 and reaches
# the others through a launch agent that enters their namespace (instead of ssh).
#   bash tests/launch/three_hosts.sh run OUT_DIR ARGS...    mpirun of ddl_train ARGS, 1 rank a host
#   bash tests/launch/three_hosts.sh cut OUT_DIR PATTERN ARGS...
#       the same, and once stdout shows PATTERN, cuts host 3's link; prints "cut after S s", "reported
#       after S s" when a rank reports the hang and "every rank ended after S s" (seconds since the start)
#   bash tests/launch/three_hosts.sh elastic OUT_DIR PATTERN ARGS...
#       launch/elastic_run.sh over the three hosts (--min-hosts 2 --max-restarts 2, and DDL_ELASTIC_OPTIONS,
#       default "--probe-seconds 10 --end-grace 10"), and once stdout shows PATTERN, cuts host 3's link for
#       good; prints "cut after S s" and "resumed after S s" when the restarted job has loaded the checkpoint
#   bash tests/launch/three_hosts.sh slow OUT_DIR PATTERN RATE ARGS...
#       the same, and once stdout shows PATTERN, limits host 3's link to RATE (tc's units, e.g. 20mbit) both
#       ways with a token bucket (tbf: this kernel has no netem); prints "slowed after S s"
# stdout and stderr of the job go to OUT_DIR/out.txt and OUT_DIR/err.txt. DDL_TRAIN: the executable (default
# build/launch/ddl_train); DDL_RANKS_PER_HOST: ranks a host (default 1); DDL_JOB_SECONDS: how long the job
# may run (default 180). Exit 77 when not root.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=$1 out=$2
shift 2
pattern="" rate=""
if [ "$mode" = cut ] || [ "$mode" = slow ] || [ "$mode" = elastic ]; then pattern=$1; shift; fi
if [ "$mode" = slow ]; then rate=$1; shift; fi
if [ "$(id -u)" -ne 0 ] || ! command -v ip > /dev/null; then echo "three_hosts: needs root and ip: skipped"; exit 77; fi
source "$root/tests/launch/netns_hosts.sh"
# One job on these namespaces at a time: tests that ctest runs side by side take turns (the job itself
# does not inherit the lock, so that a rank left behind cannot hold it).
exec 9> /tmp/ddl_three_hosts.lock
flock 9
work=""
teardown() {
  netns_hosts_down ddl_t 3
  [ -n "$work" ] && rm -rf "$work"
}
trap teardown EXIT
work=$(mktemp -d)
per_host=${DDL_RANKS_PER_HOST:-1}
netns_hosts_up ddl_t 10.78.0 3 "$per_host" "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
start=$(date +%s.%N)
elapsed() { awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }
mpirun_options="--mca plm_rsh_agent $work/agent --mca btl_tcp_if_include 10.78.0.0/24 --mca oob_tcp_if_include \
10.78.0.0/24 --mca btl self,vader,tcp -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"
exe=${DDL_TRAIN:-$root/build/launch/ddl_train}
if [ "$mode" = elastic ]; then
  read -r -a elastic_options <<< "${DDL_ELASTIC_OPTIONS:---probe-seconds 10 --end-grace 10}"
  command=(env DDL_TRAIN="$exe" bash "$root/launch/elastic_run.sh" --hostfile "$work/hosts" --min-hosts 2
           --max-restarts 2 "${elastic_options[@]}" --mpirun-options "$mpirun_options" -- "$@")
else
  read -r -a options <<< "$mpirun_options"
  command=(mpirun -np $((3 * per_host)) --hostfile "$work/hosts" "${options[@]}" "$exe" "$@")
fi
ip netns exec ddl_t1 unshare --uts sh -c 'hostname host1; exec "$@"' sh "${command[@]}" \
  > "$out/out.txt" 2> "$out/err.txt" 9>&- &
job=$!
wait_for_pattern() {
  for _ in $(seq 900); do
    grep -q -- "$pattern" "$out/out.txt" && return
    kill -0 "$job" 2>/dev/null || return
    sleep 0.1
  done
}
if [ "$mode" = slow ]; then
  wait_for_pattern
  # Host 3's sending side and the bridge's side towards it: its traffic is limited both ways.
  ip netns exec ddl_t3 tc qdisc add dev veth3 root tbf rate "$rate" burst 64kb latency 2s
  ip netns exec ddl_tbr tc qdisc add dev port3 root tbf rate "$rate" burst 64kb latency 2s
  echo "slowed after $(elapsed) s"
fi
if [ "$mode" = cut ] || [ "$mode" = elastic ]; then
  wait_for_pattern
  ip netns exec ddl_tbr ip link set port3 down
  echo "cut after $(elapsed) s"
fi
if [ "$mode" = elastic ]; then
  for _ in $(seq 3000); do
    grep -q "^resumed from" "$out/out.txt" && { echo "resumed after $(elapsed) s"; break; }
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
fi
if [ "$mode" = cut ]; then
  for _ in $(seq 300); do
    grep -q "no progress for" "$out/err.txt" && { echo "reported after $(elapsed) s"; break; }
    sleep 0.1
  done
  # Every rank, the cut-off one included, stops by itself; mpirun may not notice (its own out-of-band
  # keepalive takes minutes), so it is ended here once no rank is left.
  ranks_alive() {
    for ns in ddl_t1 ddl_t2 ddl_t3; do
      for p in $(ip netns pids "$ns" 2>/dev/null); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = ddl_train ] && return 0
      done
    done
    return 1
  }
  for _ in $(seq 300); do
    ranks_alive || { echo "every rank ended after $(elapsed) s"; break; }
    sleep 0.1
  done
  kill -KILL "$job" 2>/dev/null
fi
# A restart (elastic) takes the timeout, the grace, the probes and the job again.
for _ in $(seq $((${DDL_JOB_SECONDS:-180} * 10))); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$job" 2>/dev/null &&
  { echo "three_hosts: the job was still running after ${DDL_JOB_SECONDS:-180} s: ended by this script"; kill -KILL "$job"; }
wait "$job" 2>/dev/null
code=$?
echo "job exit code $code after $(elapsed) s"
exit 0
