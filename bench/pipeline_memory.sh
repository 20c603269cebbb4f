#!/usr/bin/env bash
# Per-rank peak memory of VGG16 at 224x224, batch 32: one rank holding the whole model against a pipeline
# of S stages (issue 5's target: at most 40% of the one-rank peak with S = 4). SGD with momentum, the
# same few steps on both; the images are resampled to 224x224 from whatever size the file holds.
#   bash bench/pipeline_memory.sh [stages] [micro-batches] [schedule] [data.h5] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
stages=${1:-4}
micro=${2:-4}
schedule=${3:-1f1b}
data=${4:-runs/sample/train.h5}
steps=${5:-2}
[ -x build/launch/ddl_train ] || bash launch/setup.sh
[ -f "$data" ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
common=(--model vgg16 --train "$data" --epochs 1 --steps-per-epoch "$steps" --batch-size 32 --optimizer sgd
        --lr 0.01 --progress never)

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; vgg16 224x224, batch 32, $steps steps"
one=$(build/launch/ddl_train "${common[@]}" | sed -n 's/.*peak RSS \([0-9]*\) MB.*/\1/p' | tail -1)
out=$(mpirun --oversubscribe -np "$stages" build/launch/ddl_train "${common[@]}" --pipeline-stages "$stages" \
        --micro-batches "$micro" --schedule "$schedule" --threads 1)
echo "$out" | sed -n '/pipeline stages:/,/^ranks/p'
by_rank=$(echo "$out" | sed -n 's/^peak RSS by rank (MB): //p')
largest=$(echo "$by_rank" | tr ' ' '\n' | sort -n | tail -1)
echo "one rank: peak $one MB"
echo "$stages stages, $micro micro-batches ($schedule): peak by rank $by_rank MB; largest $largest MB = $(awk -v a="$largest" -v b="$one" 'BEGIN {printf "%.0f%%", 100 * a / b}') of one rank"
