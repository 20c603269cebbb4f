#!/usr/bin/env bash
# Accuracy in bf16 against f32 in the paper's setup: seed_cnn, Adam 1e-3, batch 64, 10 epochs on the 40,000
# CIFAR-10 training images, validated on the other 10,000 (runs/bench/cifar.h5 and cifar_val.h5, made by
# bench/seed_cnn_vs_pytorch.sh from ../shared); three seeds in each precision, f32 and bf16 alternating
# so that both see the machine alike. Prints each run's final validation accuracy and each precision's mean.
#   bash bench/bf16_accuracy.sh [seeds="1 2 3"] [threads=2]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-"1 2 3"}
threads=${2:-2}
[ -f runs/bench/cifar.h5 ] || { echo "bf16_accuracy: run bench/seed_cnn_vs_pytorch.sh first (it makes runs/bench/cifar.h5)" >&2; exit 2; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $threads"
declare -A sum=([f32]=0 [bf16]=0)
count=0
for seed in $seeds; do
  for precision in f32 bf16; do
    out=$(build/launch/ddl_train --train runs/bench/cifar.h5 --val runs/bench/cifar_val.h5 --model seed_cnn \
      --optimizer adam --lr 0.001 --batch-size 64 --epochs 10 --threads "$threads" --progress never \
      --seed "$seed" --precision "$precision")
    accuracy=$(echo "$out" | sed -n 's/^final validation accuracy \([0-9.]*\).*/\1/p')
    [ -n "$accuracy" ] || { echo "bf16_accuracy: seed $seed $precision printed no final accuracy:" >&2; echo "$out" >&2; exit 1; }
    rate=$(echo "$out" | sed -n 's/^epoch 10\/.* \([0-9]*\) img\/s.*/\1/p')
    echo "seed $seed $precision: final validation accuracy $accuracy, last epoch $rate img/s"
    sum[$precision]=$(awk -v a="${sum[$precision]}" -v b="$accuracy" 'BEGIN { print a + b }')
  done
  count=$((count + 1))
done
f32=$(awk -v s="${sum[f32]}" -v n="$count" 'BEGIN { printf "%.4f", s / n }')
bf16=$(awk -v s="${sum[bf16]}" -v n="$count" 'BEGIN { printf "%.4f", s / n }')
echo "mean over $count seeds: f32 $f32, bf16 $bf16, difference $(awk -v a="$bf16" -v b="$f32" 'BEGIN { printf "%+.2f", 100 * (a - b) }') points"
