# Sourced, not run: what launch/elastic_run.sh (mpirun over a hostfile) and launch/slurm/elastic.sbatch
# (srun in an allocation under --no-kill) share. The caller keeps its members (hosts, nodes), starts the job
# on them with elastic_run_job, and, unless elastic_job_finished, probes them and restarts on those that
# answer (elastic_probe, elastic_next).
#   elastic_run_job GRACE CMD...     runs CMD (a job of ddl_train ranks) and sets elastic_code; ends it
#                                    GRACE seconds after a rank's error line if it is still running
#   elastic_job_finished             whether the job ended for good: finished (0), a mistake in its input
#                                    (2), or a stop signal (to the job or to this script)
#   elastic_probe ANSWERS LABEL MEMBER...
#                                    runs "ANSWERS MEMBER" (which must end within its own time limit) for
#                                    every member at once; sets elastic_kept (the members that answered)
#                                    and elastic_lost ("LABEL MEMBER" of the others)
#   elastic_next CHECKPOINT MIN MAX UNIT
#                                    says the restart (or why not, returning 1: too few left, too many
#                                    restarts, a stop signal): what was lost, what is left, the checkpoint and
#                                    the work lost since it; counts elastic_restarts
# Messages start with "$elastic_name: ".

elastic_say() { echo "$elastic_name: $*" >&2; }
elastic_restarts=0 elastic_stop_signal="" elastic_job=""
trap 'elastic_stop_signal=TERM; [ -n "$elastic_job" ] && kill -TERM "$elastic_job" 2>/dev/null' TERM
trap 'elastic_stop_signal=INT; [ -n "$elastic_job" ] && kill -INT "$elastic_job" 2>/dev/null' INT

# Waits for process $1 to end and sets elastic_status to its exit code: a trapped signal (TERM, INT) ends
# `wait` early, with the process still running.
elastic_wait() {
  elastic_status=0
  wait "$1" 2>/dev/null || elastic_status=$?  # (2>/dev/null: not the shell's "Killed" line)
  while kill -0 "$1" 2>/dev/null; do
    elastic_status=0
    wait "$1" 2>/dev/null || elastic_status=$?
  done
}

elastic_run_job() {
  local grace=$1 errors first_error="" ended_here=""
  shift
  errors=$(mktemp)
  elastic_began=$(date +%s)
  # A session of its own, so that everything it started can be ended at once.
  setsid "$@" 2> >(tee "$errors" >&2) &
  elastic_job=$!
  # A rank that fails prints one error line and exits within seconds, and mpirun (srun) ends the others;
  # but it waits for the daemon of every host, and a lost host's never answers (TCP's keepalive takes
  # minutes). Past GRACE seconds after the first error line the job is ended here, everything in its
  # session, with SIGKILL: it is already ending, and Open MPI 4.1's mpirun crashed on a SIGTERM then.
  while kill -0 "$elastic_job" 2>/dev/null; do
    if [ -z "$first_error" ] && grep -q "^ddl_train: error" "$errors"; then first_error=$(date +%s); fi
    if [ -n "$first_error" ] && [ $(($(date +%s) - first_error)) -ge "$grace" ]; then
      elastic_say "the job still runs $grace s after a rank's error line (a lost host's daemon does not answer): ending it"
      ended_here=1
      pkill -KILL -s "$elastic_job"
      break
    fi
    sleep 1
  done
  elastic_wait "$elastic_job"
  elastic_code=$elastic_status
  [ -n "$ended_here" ] && elastic_code=1
  elastic_ended=$(date +%s)
  elastic_job=""
  rm -f "$errors"
}

elastic_job_finished() {
  [ "$elastic_code" -eq 0 ] || [ "$elastic_code" -eq 2 ] || [ -n "$elastic_stop_signal" ] ||
    [ "$elastic_code" -eq 130 ] || [ "$elastic_code" -eq 143 ]
}

elastic_probe() {
  local answers=$1 label=$2 m i
  shift 2
  local members=("$@") probes=()
  for m in "${members[@]}"; do
    "$answers" "$m" > /dev/null 2>&1 &
    probes+=($!)
  done
  elastic_kept=() elastic_lost=()
  for i in "${!members[@]}"; do
    elastic_wait "${probes[i]}"
    if [ "$elastic_status" -eq 0 ]; then
      elastic_kept+=("${members[i]}")
    else
      elastic_lost+=("$("$label" "${members[i]}")")
    fi
  done
}

elastic_next() {
  local checkpoint=$1 min=$2 max=$3 unit=$4 minutes since lost
  if [ -f "$checkpoint" ]; then
    minutes=$(awk -v a="$(stat -c %Y "$checkpoint")" -v b="$elastic_ended" \
      'BEGIN {m = (b - a) / 60; printf "%.1f", m < 0 ? 0 : m}')
    since="$checkpoint, written $minutes min before the job ended"
  else
    minutes=$(awk -v a="$elastic_began" -v b="$elastic_ended" 'BEGIN {printf "%.1f", (b - a) / 60}')
    since="the start (no checkpoint yet)"
  fi
  if [ -n "$elastic_stop_signal" ]; then
    elastic_say "stopped by SIG$elastic_stop_signal before a restart (the last checkpoint: $since)"
    [ "$elastic_stop_signal" = TERM ] && elastic_code=143 || elastic_code=130
    return 1
  fi
  lost=$(IFS=,; echo "${elastic_lost[*]}")
  lost=${lost:+lost ${lost//,/, }}
  lost=${lost:-every $unit answers}
  if [ ${#elastic_kept[@]} -lt "$min" ]; then
    elastic_say "ddl_train ended with exit code $elastic_code; $lost; ${#elastic_kept[@]} $unit(s) left, fewer than the minimum of $min: stopping (the last checkpoint: $since)"
    return 1
  fi
  if [ "$elastic_restarts" -ge "$max" ]; then
    elastic_say "ddl_train ended with exit code $elastic_code; $lost; $elastic_restarts restart(s) made, the most allowed: stopping (the last checkpoint: $since)"
    return 1
  fi
  elastic_restarts=$((elastic_restarts + 1))
  elastic_say "restart $elastic_restarts/$max after exit code $elastic_code: $lost; continuing on ${#elastic_kept[@]} $unit(s) from $since (about $minutes min of work lost)"
}
