#!/usr/bin/env bash
# Runs ddl_train with mpirun over a hostfile's hosts and carries on after a host or rank is lost: when the job
# ends otherwise than by finishing, by a mistake in its input (exit 2) or by a stop signal, the hosts that
# still answer start it again from <checkpoint-dir>/last.h5 (--resume auto), with the ranks they have, up to
# --max-restarts times. Keep the global batch with --global-batch in place of --batch-size; a manual layout
# (--pipeline-stages, --tensor-parallel) must still divide the ranks left, --strategy auto plans them anew.
#   bash launch/elastic_run.sh --hostfile HOSTS --min-hosts K [--max-restarts N (3)] [--probe-seconds S (30)]
#     [--end-grace S (30)] [--mpirun-options "OPTIONS"] -- DDL_TRAIN_OPTIONS...
# A host answers when mpirun starts `true` on it within --probe-seconds, the way it starts the ranks (ssh,
# or the launch agent in --mpirun-options). A lost rank whose host answers restarts there. mpirun, which
# may wait for a lost host's daemon for minutes, is ended --end-grace seconds after a rank's error line.
# Exit code: ddl_train's last one (0 once it finishes). DDL_TRAIN: the executable (default
# build/launch/ddl_train).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "elastic_run: $*" >&2; }
usage() {
  say "$1"
  say "usage: elastic_run.sh --hostfile HOSTS --min-hosts K [--max-restarts N] [--probe-seconds S] [--end-grace S] [--mpirun-options \"...\"] -- DDL_TRAIN_OPTIONS..."
  exit 2
}
whole_number() { [[ "$2" =~ ^[0-9]+$ ]] || usage "$1 takes a whole number, not '$2'"; }

hostfile="" min_hosts="" max_restarts=3 probe_seconds=30 end_grace=30 mpirun_options=""
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  [ $# -ge 2 ] || usage "$1 needs a value"
  case "$1" in
    --hostfile) hostfile=$2 ;;
    --min-hosts) whole_number "$1" "$2"; min_hosts=$2 ;;
    --max-restarts) whole_number "$1" "$2"; max_restarts=$2 ;;
    --probe-seconds) whole_number "$1" "$2"; probe_seconds=$2 ;;
    --end-grace) whole_number "$1" "$2"; end_grace=$2 ;;
    --mpirun-options) mpirun_options=$2 ;;
    *) usage "unknown option $1" ;;
  esac
  shift 2
done
[ "${1:-}" = -- ] || usage "the ddl_train options follow --"
shift
train_args=("$@")
[ -n "$hostfile" ] || usage "--hostfile is required"
[ -r "$hostfile" ] || usage "cannot read the hostfile $hostfile"
[ -n "$min_hosts" ] && [ "$min_hosts" -ge 1 ] || usage "--min-hosts is required, at least 1"
checkpoint_dir=""
for ((i = 0; i < ${#train_args[@]}; ++i)); do
  case "${train_args[i]}" in
    --checkpoint-dir) checkpoint_dir=${train_args[i + 1]:-} ;;
    --checkpoint-dir=*) checkpoint_dir=${train_args[i]#*=} ;;
    --resume | --resume=*) usage "it adds --resume auto itself: leave --resume out" ;;
  esac
done
[ -n "$checkpoint_dir" ] || usage "the ddl_train options need --checkpoint-dir, from which a restart continues"
exe=${DDL_TRAIN:-$root/build/launch/ddl_train}
[ -x "$exe" ] || { say "$exe missing: run 'bash launch/setup.sh' first"; exit 2; }
read -r -a mpirun_extra <<< "$mpirun_options"

# The hostfile's lines that name a host (comments and blank lines left out), in its order: mpirun gives
# each host its slots' ranks in turn, so a host's ranks follow from the lines before it.
mapfile -t lines < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$hostfile")
[ ${#lines[@]} -ge 1 ] || usage "$hostfile names no host"
slots_of() { local s; s=$(sed -n 's/.*slots=\([0-9]*\).*/\1/p' <<< "$1"); echo "${s:-1}"; }
ranks_text() {  # "ranks 2-3" of line $1 among the lines listed after it
  local line=$1 first=0 l
  shift
  for l in "$@"; do
    [ "$l" = "$line" ] && break
    first=$((first + $(slots_of "$l")))
  done
  local last=$((first + $(slots_of "$line") - 1))
  [ "$first" -eq "$last" ] && echo "rank $first" || echo "ranks $first-$last"
}
answers() {  # whether mpirun starts a process on host $1 within the probe's time
  timeout -k 5 "$probe_seconds" mpirun -np 1 --host "$1" "${mpirun_extra[@]}" true > /dev/null 2>&1
}

current=$(mktemp) errors=$(mktemp)
trap 'rm -f "$current" "$errors"' EXIT
stop_signal="" job=""
trap 'stop_signal=TERM; [ -n "$job" ] && kill -TERM "$job" 2>/dev/null' TERM
trap 'stop_signal=INT; [ -n "$job" ] && kill -INT "$job" 2>/dev/null' INT
restarts=0
while true; do
  printf '%s\n' "${lines[@]}" > "$current"
  ranks=0
  for l in "${lines[@]}"; do ranks=$((ranks + $(slots_of "$l"))); done
  began=$(date +%s)
  : > "$errors"
  mpirun -np "$ranks" --hostfile "$current" "${mpirun_extra[@]}" "$exe" "${train_args[@]}" --resume auto \
    2> >(tee "$errors" >&2) &
  job=$!
  # A rank that fails prints one error line and exits within seconds, and mpirun ends the others; but it
  # waits for the daemons of every host to answer, and a lost host's never does (TCP's keepalive takes
  # minutes). Past --end-grace seconds after the first error line it is ended here, with SIGKILL: it is
  # already aborting, and Open MPI 4.1's mpirun crashed on a SIGTERM then.
  first_error="" ended_here=""
  while kill -0 "$job" 2>/dev/null; do
    if [ -z "$first_error" ] && grep -q "^ddl_train: error" "$errors"; then first_error=$(date +%s); fi
    if [ -n "$first_error" ] && [ $(($(date +%s) - first_error)) -ge "$end_grace" ]; then
      say "mpirun still runs ${end_grace} s after a rank's error line (a lost host's daemon does not answer): ending it"
      ended_here=1
      kill -KILL "$job" 2>/dev/null
      break
    fi
    sleep 1
  done
  code=0
  wait "$job" 2>/dev/null || code=$?  # not the shell's "Killed" line
  [ -n "$ended_here" ] && code=1
  ended=$(date +%s)
  job=""
  if [ "$code" -eq 0 ] || [ "$code" -eq 2 ] || [ -n "$stop_signal" ] || [ "$code" -eq 130 ] || [ "$code" -eq 143 ]; then
    exit "$code"
  fi
  # Every host probed at once: a lost one takes the whole --probe-seconds.
  probes=()
  for l in "${lines[@]}"; do
    answers "${l%%[[:space:]]*}" &
    probes+=($!)
  done
  lost=() kept=()
  for i in "${!lines[@]}"; do
    l=${lines[i]}
    if wait "${probes[i]}"; then kept+=("$l"); else lost+=("${l%%[[:space:]]*} ($(ranks_text "$l" "${lines[@]}"))"); fi
  done
  checkpoint="$checkpoint_dir/last.h5"
  if [ -f "$checkpoint" ]; then
    minutes=$(awk -v a="$(stat -c %Y "$checkpoint")" -v b="$ended" 'BEGIN {m = (b - a) / 60; printf "%.1f", m < 0 ? 0 : m}')
    since="$checkpoint, written $minutes min before the job ended"
  else
    minutes=$(awk -v a="$began" -v b="$ended" 'BEGIN {printf "%.1f", (b - a) / 60}')
    since="the start (no checkpoint yet)"
  fi
  lost_text=${lost[*]:+lost ${lost[*]}}
  lost_text=${lost_text:-every host answers}
  if [ ${#kept[@]} -lt "$min_hosts" ]; then
    say "ddl_train ended with exit code $code; $lost_text; ${#kept[@]} host(s) left, fewer than --min-hosts $min_hosts: stopping (the last checkpoint: $since)"
    exit "$code"
  fi
  if [ "$restarts" -ge "$max_restarts" ]; then
    say "ddl_train ended with exit code $code; $lost_text; $restarts restart(s) made, --max-restarts $max_restarts: stopping (the last checkpoint: $since)"
    exit "$code"
  fi
  restarts=$((restarts + 1))
  lines=("${kept[@]}")
  ranks=0
  for l in "${lines[@]}"; do ranks=$((ranks + $(slots_of "$l"))); done
  say "restart $restarts/$max_restarts after exit code $code: $lost_text; continuing on ${#lines[@]} host(s), $ranks rank(s), from $since (about $minutes min of work lost)"
done
