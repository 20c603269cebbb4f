#!/usr/bin/env bash
# For fault tests: runs COMMAND (an mpirun or a single ddl_train), and once its output shows PATTERN
# sends SIGNAL to the ddl_train process of MPI rank RANK (any ddl_train it started when RANK is "any").
# Passes the command's stdout and stderr through, prints "signalled after S s" and "ended after S s" on
# stderr (seconds since the start), and exits with the command's exit code.
#   bash tests/launch/signal_rank.sh SIGNAL RANK PATTERN COMMAND...
set -uo pipefail
signal=$1 rank=$2 pattern=$3
shift 3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
start=$(date +%s.%N)
setsid "$@" > "$out" 2> "$err" &
job=$!
elapsed() { awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }
descendants() {  # of process $1: the ranks, in the session of a launcher that made its own (elastic_run.sh)
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}
rank_pid() {
  for p in $(descendants "$job"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = ddl_train ] || continue
    # A rank ending as the scan runs takes its /proc entry with it. grep reads the file itself: after a pipe,
    # grep -q's early exit could end its writer with SIGPIPE, which pipefail made a miss (a rank's
    # environment can be larger than one write: the ThreadSanitizer runs missed rank 1 so).
    if [ "$rank" = any ] || grep -qxz "OMPI_COMM_WORLD_RANK=$rank" "/proc/$p/environ" 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}
for _ in $(seq 600); do
  grep -q -- "$pattern" "$out" && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
pid=$(rank_pid)
if [ -n "$pid" ]; then
  kill "-$signal" "$pid"
  echo "signalled after $(elapsed) s" >&2
else
  echo "signal_rank: no rank $rank to signal: the output did not show '$pattern' while the job ran" >&2
fi
# A stopped or cut-off rank must not keep the test waiting: give up after 120 s.
for _ in $(seq 1200); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$job" 2>/dev/null && kill -KILL -- "-$job"
wait "$job"
code=$?
cat "$out"
cat "$err" >&2
echo "ended after $(elapsed) s" >&2
exit "$code"
