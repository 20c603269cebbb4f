#!/usr/bin/env bash
# The main job on the sample data shipped in data/: set up, import 6,000 CIFAR-10 images (20% held out),
# train seed_cnn on 2 MPI ranks for a few epochs, print the validation accuracy.
# Usage: bash launch/run_sample.sh [extra ddl_train options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh

if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
work=runs/sample
mkdir -p "$work"
tar xzf data/cifar10_sample.tar.gz -C "$work"
build/launch/ddl_data import --from "$work/cifar10_sample" --output "$work/train.h5" --val-fraction 0.2 --seed 1

# The sample's settings, each replaced by the user's own where one is given (ddl_train refuses an option
# given twice).
defaults=(--model seed_cnn --train "$work/train.h5" --val "$work/train_val.h5" --epochs 5 --batch-size 32
          --optimizer adam --lr 0.001 --seed 1 --checkpoint-dir "$work/checkpoints" --metrics "$work/metrics.csv")
args=()
for ((i = 0; i < ${#defaults[@]}; i += 2)); do
  given=""
  for arg in "$@"; do [[ "$arg" = "${defaults[i]}" || "$arg" = "${defaults[i]}="* ]] && given=1; done
  [ -n "$given" ] || args+=("${defaults[i]}" "${defaults[i + 1]}")
done
# Two ranks on one machine; --oversubscribe lets it run on a single core too.
mpirun --oversubscribe -np 2 build/launch/ddl_train "${args[@]}" "$@"
echo "run_sample: metrics in $work/metrics.csv, checkpoints in $work/checkpoints"
