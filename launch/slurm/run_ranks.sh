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
# DDL_NODELIST (elastic.sbatch): only these nodes of the allocation, as many ranks a node as it has. The
# step may overlap the one that lost a node: Slurm keeps that one's CPUs on every node until it declares the
# lost node down (SlurmdTimeout, 5 minutes by default), though its ranks have ended.
nodes=${DDL_NODELIST:-$SLURM_JOB_NODELIST} node_count=$SLURM_JOB_NUM_NODES ranks=$SLURM_NTASKS
step=() hosts=()
if [ -n "${DDL_NODELIST:-}" ]; then
  per_node=${SLURM_NTASKS_PER_NODE:-$((SLURM_NTASKS / SLURM_JOB_NUM_NODES))}
  IFS=, read -r -a node_names <<< "$DDL_NODELIST"
  node_count=${#node_names[@]} ranks=$((${#node_names[@]} * per_node))
  step=(--nodes="$node_count" --nodelist="$DDL_NODELIST" --ntasks="$ranks" --ntasks-per-node="$per_node" --overlap)
  hosts=(--host "$(printf "%s:$per_node," "${node_names[@]}" | sed 's/,$//')")
fi
echo "ddl on $node_count node(s) ($nodes), $ranks ranks x $threads threads"
# Slurm's SIGTERM goes to this script; pass it on to the ranks so that they checkpoint and stop.
case "${DDL_LAUNCH:-srun}" in
  srun)
    srun --mpi=pmix --cpu-bind=cores --kill-on-bad-exit=1 "${step[@]}" "$exe" "${args[@]}" "${user_args[@]}" & ;;
  mpirun)
    mpirun --bind-to core --map-by "slot:PE=$threads" "${hosts[@]}" "$exe" "${args[@]}" "${user_args[@]}" & ;;
  *) echo "run_ranks.sh: DDL_LAUNCH must be srun or mpirun" >&2; exit 2 ;;
esac
job=$!
trap 'kill -TERM "$job" 2>/dev/null' TERM INT
code=0
wait "$job" || code=$?
# A signal interrupts the first wait; the second collects the ranks' own exit code.
if kill -0 "$job" 2>/dev/null; then
  code=0
  wait "$job" || code=$?
fi
exit "$code"
