#!/usr/bin/env bash
# Starts ddl_train's ranks inside a Slurm allocation (called by the .sbatch scripts): with srun and Slurm's
# PMIx plug-in (Debian's Open MPI works with --mpi=pmix; --mpi=pmi2 does not), or with Open MPI's mpirun,
# which reads the allocation itself. Each rank gets --cpus-per-task threads, bound to its own cores.
set -uo pipefail
root=${DDL_ROOT:-$SLURM_SUBMIT_DIR}
threads=${SLURM_CPUS_PER_TASK:-1}
args=(--threads "$threads" --progress never)
read -r -a user_args <<< "${DDL_ARGS:-}"
exe=${DDL_TRAIN:-$root/build/launch/ddl_train}  # where the build is elsewhere
[ -x "$exe" ] || { echo "run_ranks.sh: $exe missing: run 'bash launch/setup.sh' first" >&2; exit 2; }
echo "ddl on $SLURM_JOB_NUM_NODES node(s) ($SLURM_JOB_NODELIST), $SLURM_NTASKS ranks x $threads threads"
# Slurm's SIGTERM goes to this script; pass it on to the ranks so that they checkpoint and stop.
case "${DDL_LAUNCH:-srun}" in
  srun)
    srun --mpi=pmix --cpu-bind=cores --kill-on-bad-exit=1 "$exe" "${args[@]}" "${user_args[@]}" & ;;
  mpirun)
    mpirun --bind-to core --map-by "slot:PE=$threads" "$exe" "${args[@]}" "${user_args[@]}" & ;;
  *) echo "run_ranks.sh: DDL_LAUNCH must be srun or mpirun" >&2; exit 2 ;;
esac
ranks=$!
trap 'kill -TERM "$ranks" 2>/dev/null' TERM INT
code=0
wait "$ranks" || code=$?
# A signal interrupts the first wait; the second collects the ranks' own exit code.
if kill -0 "$ranks" 2>/dev/null; then
  code=0
  wait "$ranks" || code=$?
fi
exit "$code"
