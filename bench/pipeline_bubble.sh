#!/usr/bin/env bash
# Pipeline efficiency: the measured idle share of the stages (time blocked on a neighbour's message, mean
# over stages) next to GPipe's ideal bubble (S - 1) / (M + S - 1), for each number of stages S and of
# micro-batches M. vit_tiny with 8 encoder blocks (16 equal residual layers), so the measured cut can
# balance the stages. One thread per stage; S must not exceed the cores, or the stages share cores and the
# figures mean little.
# The second epoch is reported (the first builds the primitives of each micro-batch size).
#   bash bench/pipeline_bubble.sh ["2 4"] ["4 8 16"] [schedule] [data.h5] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
stages_list=${1:-"2"}
micro_list=${2:-"4 8 16"}
schedule=${3:-gpipe}
data=${4:-runs/sample/train.h5}
steps=${5:-100}
[ -x build/launch/ddl_train ] || bash launch/setup.sh
[ -f "$data" ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
common=(--model vit_tiny --depth 8 --train "$data" --epochs 2 --steps-per-epoch "$steps" --batch-size 64 --optimizer sgd
        --lr 0.01 --progress never --schedule "$schedule")
last_epoch() { grep '^epoch 2/2' | tail -1; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; vit_tiny depth 8, batch 64, $schedule, 1 thread a stage"
rate_of() { last_epoch | sed -n 's/.* \([0-9][0-9]*\) img\/s.*/\1/p'; }
echo "one rank, whole batch: $(build/launch/ddl_train "${common[@]}" --threads 1 | rate_of) img/s with 1 thread," \
     "$(build/launch/ddl_train "${common[@]}" --threads "$(nproc)" | rate_of) img/s with $(nproc)"
printf '%7s %14s %10s %14s %14s\n' stages micro-batches img/s "idle measured" "ideal bubble"
for s in $stages_list; do
  for m in $micro_list; do
    line=$(mpirun --oversubscribe -np "$s" build/launch/ddl_train "${common[@]}" --pipeline-stages "$s" \
             --micro-batches "$m" --threads 1 | last_epoch)
    rate=$(echo "$line" | rate_of)
    idle=$(echo "$line" | sed -n 's/.*pipeline wait \([0-9.]*\)%.*/\1/p')
    printf '%7s %14s %10s %13s%% %13.1f%%\n' "$s" "$m" "$rate" "$idle" "$(awk -v s="$s" -v m="$m" 'BEGIN {print 100 * (s - 1) / (m + s - 1)}')"
  done
done
