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
# build/launch/ddl_train). --checkpoint-dir must be on the command line (not only in a --config file).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() {
  echo "elastic_run: $1" >&2
  echo "elastic_run: usage: elastic_run.sh --hostfile HOSTS --min-hosts K [--max-restarts N] [--probe-seconds S] [--end-grace S] [--mpirun-options \"...\"] -- DDL_TRAIN_OPTIONS..." >&2
  exit 2
}
whole_number() { [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || usage "$1 takes a whole number of at least $3, not '$2'"; }

hostfile="" min_hosts="" max_restarts=3 probe_seconds=30 end_grace=30 mpirun_options=""
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  [ $# -ge 2 ] || usage "$1 needs a value"
  case "$1" in
    --hostfile) hostfile=$2 ;;
    --min-hosts) whole_number "$1" "$2" 1; min_hosts=$2 ;;
    --max-restarts) whole_number "$1" "$2" 0; max_restarts=$2 ;;
    --probe-seconds) whole_number "$1" "$2" 1; probe_seconds=$2 ;;
    --end-grace) whole_number "$1" "$2" 1; end_grace=$2 ;;
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
[ -n "$min_hosts" ] || usage "--min-hosts is required"
checkpoint_dir=""
for ((i = 0; i < ${#train_args[@]}; ++i)); do
  case "${train_args[i]}" in
    --checkpoint-dir) checkpoint_dir=${train_args[i + 1]:-} ;;
    --checkpoint-dir=*) checkpoint_dir=${train_args[i]#*=} ;;
    --resume | --resume=*) usage "it adds --resume auto itself: leave --resume out" ;;
    --timeout | --timeout=*)
      value=${train_args[i]#--timeout=}
      [ "$value" = --timeout ] && value=${train_args[i + 1]:-}
      # 0 is no limit: the ranks left would wait for a lost host for ever.
      [[ "$value" =~ ^0*\.?0*$ ]] && usage "--timeout 0 would leave the ranks waiting for a lost host for ever" ;;
  esac
done
[ -n "$checkpoint_dir" ] || usage "the ddl_train options need --checkpoint-dir, from which a restart continues"
exe=${DDL_TRAIN:-$root/build/launch/ddl_train}
[ -x "$exe" ] || { echo "elastic_run: $exe missing: run 'bash launch/setup.sh' first" >&2; exit 2; }
read -r -a mpirun_extra <<< "$mpirun_options"

# The hostfile's lines that name a host (comments and blank lines left out), in its order: mpirun gives
# each host its slots' ranks in turn, so a host's ranks follow from the lines before it.
mapfile -t lines < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$hostfile")
[ ${#lines[@]} -ge 1 ] || usage "$hostfile names no host"
slots_of() { local s; s=$(sed -n 's/\(^\|.*[[:space:]]\)slots=\([0-9]*\).*/\2/p' <<< "$1"); echo "${s:-1}"; }
# "10.0.0.3 (ranks 2-3)": a hostfile line's host and the ranks mpirun gave it, its slots in the
# hostfile's order.
host_and_ranks() {
  local first=0 l
  for l in "${lines[@]}"; do
    [ "$l" = "$1" ] && break
    first=$((first + $(slots_of "$l")))
  done
  local last=$((first + $(slots_of "$1") - 1))
  [ "$first" -eq "$last" ] && echo "${1%%[[:space:]]*} (rank $first)" || echo "${1%%[[:space:]]*} (ranks $first-$last)"
}
answers() { timeout -k 5 "$probe_seconds" mpirun -np 1 --host "${1%%[[:space:]]*}" "${mpirun_extra[@]}" true; }

elastic_name=elastic_run
source "$root/launch/elastic_restarts.sh"
current=$(mktemp)
trap 'rm -f "$current"' EXIT
while true; do
  printf '%s\n' "${lines[@]}" > "$current"
  ranks=0
  for l in "${lines[@]}"; do ranks=$((ranks + $(slots_of "$l"))); done
  elastic_run_job "$end_grace" mpirun -np "$ranks" --hostfile "$current" "${mpirun_extra[@]}" "$exe" \
    "${train_args[@]}" --resume auto
  elastic_job_finished && exit "$elastic_code"
  elastic_probe answers host_and_ranks "${lines[@]}"
  elastic_next "$checkpoint_dir/last.h5" "$min_hosts" "$max_restarts" host || exit "$elastic_code"
  lines=("${elastic_kept[@]}")
done
