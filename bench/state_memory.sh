#!/usr/bin/env bash
# Per-rank peak memory, speed and bytes sent of one model on R ranks of one node (oversubscribed: memory does
# not depend on speed) with Adam: plain data parallelism, the optimizer's state sharded (ZeRO stage 1), the
# gradients too (stage 2), the parameters too (stage 3), activations recomputed, both, and a 2-stage pipeline
# with as many replicas as fit; then what --strategy auto chooses under a memory limit between the stage 1
# and the plain peak, one between stage 2's and stage 1's, and one between stage 3's and stage 2's, planned
# against measured. The images are resampled to the model's
# size from whatever the file holds.
#   bash bench/state_memory.sh [model] [ranks] [batch a rank] [data.h5] [steps] [extra ddl_train options...]
#   DDL_LIMITS="GB GB ..." runs only the planner's rows, under those limits (from an earlier run's peaks).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-vgg16}
ranks=${2:-4}
batch=${3:-8}
data=${4:-runs/sample/train.h5}
steps=${5:-2}
shift $(($# < 5 ? $# : 5))
[ -x build/launch/ddl_train ] || bash launch/setup.sh
[ -f "$data" ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
common=(--model "$model" --train "$data" --epochs 1 --steps-per-epoch "$steps" --batch-size "$batch" --optimizer adam
        --lr 0.0001 --progress never --threads 1 "$@")

# One run: its largest rank's peak RSS (MB), img/s, MB all-reduced a step and the plan's chosen line.
run() {
  local out
  out=$(mpirun --oversubscribe -np "$ranks" build/launch/ddl_train "${common[@]}" "$@" 2>&1) || {
    echo "$out" | tail -3 >&2
    return 1
  }
  local peak ips sent global seconds
  peak=$(echo "$out" | sed -n 's/^peak RSS by rank (MB): //p' | tr ' ' '\n' | sort -n | tail -1)
  # The epoch line's img/s is rounded to a whole number: from the global batch and the epoch's time instead.
  global=$(echo "$out" | sed -n 's/.*(global \([0-9]*\)).*/\1/p' | tail -1)
  seconds=$(echo "$out" | sed -n 's/.*  time \([0-9.]*\) s .*/\1/p' | tail -1)
  ips=$(awk -v g="$global" -v n="$steps" -v t="$seconds" 'BEGIN {printf "%.2f", g * n / t}')
  sent=$(echo "$out" | sed -n 's/.* \([0-9.]*\) MB all-reduced\/step.*/\1/p' | tail -1)
  echo "| $* | $peak | $ips | ${sent:--} |"
  echo "$out" | grep -E "^  (chosen|why) " >&2 || true
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $model, $ranks ranks, batch $batch a rank, Adam, $steps steps"
echo "| options | peak RSS MB (largest rank) | img/s | MB all-reduced a step |"
echo "| --- | ---: | ---: | ---: |"
planner_rows() {  # --strategy auto under each limit (GB)
  for limit in "$@"; do
    echo "--strategy auto --memory-limit $limit (GB; plan lines on stderr):"
    run --allreduce ring --strategy auto --memory-limit "$limit"
  done
}
if [ -n "${DDL_LIMITS:-}" ]; then
  planner_rows $DDL_LIMITS
  exit
fi
plain=$(run --allreduce ring)
echo "$plain"
sharded=$(run --shard-state 1)
echo "$sharded"
gradients=$(run --shard-state 2)
echo "$gradients"
parameters=$(run --shard-state 3)
echo "$parameters"
run --allreduce ring --recompute
run --shard-state 1 --recompute
run --allreduce ring --pipeline-stages 2 --micro-batches 2
# The planner under a limit halfway between the sharded and the plain peak, then between stage 2's and
# stage 1's, then between stage 3's and stage 2's.
peak() { echo "$1" | cut -d'|' -f3; }
midway() { echo "$(peak "$1") $(peak "$2")" | awk '{printf "%.3f", ($1 + $2) / 2 / 1000}'; }
planner_rows "$(midway "$plain" "$sharded")" "$(midway "$sharded" "$gradients")" "$(midway "$gradients" "$parameters")"
