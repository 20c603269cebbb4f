#!/usr/bin/env bash
# Images/s of ZeRO's stages 0 to 3 (--shard-state) side by side: rounds alternating the four, each the
# second epoch of a run (no set-up in it), medians at the end. Ring all-reduce on every side, so that the
# bytes and the sums are the same; the cores shared evenly among the ranks.
#   bash bench/sharded_speed.sh [model] [ranks] [batch a rank] [rounds] [steps] [data.h5] [extra ddl_train options...]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-vgg16_cifar}
ranks=${2:-2}
batch=${3:-32}
rounds=${4:-3}
steps=${5:-25}
data=${6:-runs/sample/train.h5}
shift $(($# < 6 ? $# : 6))
[ -x build/launch/ddl_train ] || bash launch/setup.sh
[ -f "$data" ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
cores=$(nproc)
threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; $model, $ranks ranks x $threads threads, batch $batch a rank, Adam, epochs of $steps steps"
declare -A rates
for round in $(seq "$rounds"); do
  for stage in 0 1 2 3; do
    out=$(mpirun --oversubscribe -np "$ranks" build/launch/ddl_train --model "$model" --train "$data" --val-fraction 0 \
      --batch-size "$batch" --epochs 2 --steps-per-epoch "$steps" --optimizer adam --allreduce ring --threads "$threads" \
      --progress never --shard-state "$stage" "$@" 2>&1) || { echo "$out" | tail -3 >&2; exit 1; }
    line=$(echo "$out" | grep '^epoch 2/2')
    # From the global batch and the epoch's time: the epoch line's img/s is rounded to a whole number.
    global=$(echo "$out" | sed -n 's/.*(global \([0-9]*\)).*/\1/p' | tail -1)
    seconds=$(echo "$line" | sed -n 's/.*  time \([0-9.]*\) s .*/\1/p')
    rate=$(awk -v g="${global:-$((batch * ranks))}" -v n="$steps" -v t="$seconds" 'BEGIN {printf "%.1f", g * n / t}')
    peak=$(echo "$line" | sed -n 's/.*peak RSS \([0-9]*\) MB.*/\1/p')
    echo "round $round, --shard-state $stage: $rate img/s, peak RSS $peak MB"
    rates[$stage]+="$rate "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
m0=$(echo "${rates[0]}" | median)
for stage in 0 1 2 3; do
  m=$(echo "${rates[$stage]}" | median)
  echo "--shard-state $stage: median $m img/s ($(awk -v a="$m" -v b="$m0" 'BEGIN {printf "%.3f", a / b}') of stage 0's)"
done
