#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine (tests/launch/slurm_daemons.sh), for the job-script test,
# everything under a temporary folder that is removed at the end. Then: the one-node job script trains on
# the sample data (srun --mpi=pmix), and the resumable script continues that run's checkpoint, then is
# pre-empted (SIGTERM to its ranks), checkpoints, submits its continuation, which finishes the run. Needs
# root and Debian's slurmctld, slurmd, slurm-client and munge, and a built tree (DDL_TRAIN, DDL_DATA: the
# programs, default build/launch/). Exit 77 (skipped) when not root or Slurm is missing.
#   bash tests/launch/slurm_cluster.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
  echo "slurm_cluster: needs root, slurmctld, slurmd and munged: skipped"
  exit 77
fi
source "$root/tests/launch/slurm_daemons.sh"
dir=$(mktemp -d /tmp/ddl-slurm.XXXXXX)
host=$(hostname -s)
on_node() { shift; "$@"; }
cleanup() {
  slurm_down "$dir"
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/work"
tar xzf "$root/data/cifar10_sample.tar.gz" -C "$dir"
"${DDL_DATA:-$root/build/launch/ddl_data}" import --from "$dir/cifar10_sample" --output "$dir/train.h5" \
  --val-fraction 0.2 --seed 1 > /dev/null
train=$dir/train.h5 val=$dir/train_val.h5
slurm_up "$dir" "$host=127.0.0.1"

# Runs a job script to its end; prints its output and returns its exit code.
run_job() {
  local id
  id=$(sbatch --parsable --wait --chdir="$root" --output="$dir/work/%j.out" "$@") || true
  id=${id%%;*}
  cat "$dir/work/$id.out"
  scontrol show job "$id" | sed -n 's/.*ExitCode=\([0-9]*\):.*/\1/p' | head -1 | { read -r code; return "${code:-1}"; }
}
wait_for() {  # until the command succeeds, at most 120 s
  for _ in $(seq 600); do "$@" && return 0; sleep 0.2; done
  return 1
}
job_state() { scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
finished() { case "$(job_state "$1")" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) return 0 ;; esac; return 1; }

export DDL_ROOT="$root"
ckpt="$dir/work/ckpt"
export DDL_ARGS="--train $train --val $val --epochs 1 --steps-per-epoch 20 --seed 3 --checkpoint-dir $ckpt"
echo "== one_node.sbatch"
run_job "$root/launch/slurm/one_node.sbatch" | tee "$dir/work/one.txt"
grep -q "final validation accuracy" "$dir/work/one.txt"
[ -f "$ckpt/last.h5" ] || { echo "slurm_cluster: no checkpoint written"; exit 1; }
echo "== resumable.sbatch continues it to 2 epochs"
export DDL_ARGS="--train $train --val $val --epochs 2 --steps-per-epoch 20 --seed 3 --checkpoint-dir $ckpt"
run_job "$root/launch/slurm/resumable.sbatch" | tee "$dir/work/two.txt"
grep -q "resumed from $ckpt/last.h5 after epoch 1" "$dir/work/two.txt"
grep -q "epoch 2/2" "$dir/work/two.txt"

echo "== pre-emption: SIGTERM to the ranks of a resumable job; it checkpoints and submits its continuation"
export DDL_ARGS="--train $train --epochs 3 --steps-per-epoch 60 --seed 3 --checkpoint-dir $dir/work/pre"
first=$(sbatch --parsable --chdir="$root" --output="$dir/work/%j.out" "$root/launch/slurm/resumable.sbatch")
first=${first%%;*}
wait_for grep -qs "epoch 1/3" "$dir/work/$first.out"
scancel --signal=TERM "$first"
wait_for finished "$first"
cat "$dir/work/$first.out"
grep -q "stopped by a signal" "$dir/work/$first.out"
next=$(sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' "$dir/work/$first.out")
[ -n "$next" ] || { echo "slurm_cluster: no continuation was submitted"; exit 1; }
wait_for finished "$next"
[ -f "$dir/work/$next.out" ] || { echo "slurm_cluster: job $next wrote no output"; scontrol show job "$next"; exit 1; }
cat "$dir/work/$next.out"
grep -q "resumed from" "$dir/work/$next.out"
grep -q "epoch 3/3" "$dir/work/$next.out"
[ "$(job_state "$next")" = COMPLETED ]
echo "slurm_cluster: done"
