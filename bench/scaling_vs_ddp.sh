#!/usr/bin/env bash
# Data-parallel scaling of seed_cnn: images/s of `mpirun -np R ddl_train` for each R, next to PyTorch DDP
# (../shared/peers/pytorch_ddp_bench.py, gloo) with the same ranks and threads in the same run, and next to
# the machine's ceiling: R independent single-rank ddl_train processes started at once, each bound to its
# own cores, their images/s summed (no communication at all). Batch 64 per rank, 200 steps.
#   bash bench/scaling_vs_ddp.sh "1 2 4 8 16" [extra ddl_train options]
set -euo pipefail
cd "$(dirname "$0")/.."
ranks_list=${1:-"1 2"}
shift || true
shared=${DDL_SHARED:-../shared}
work=runs/bench
cores=$(nproc)
mkdir -p "$work"
[ -x build/launch/ddl_train ] || bash launch/setup.sh
if [ ! -f "$work/cifar.h5" ]; then
  [ -d "$work/train" ] || tar xzf "$shared/datasets/cifar10/train.tar.gz" -C "$work"
  build/launch/ddl_data import --from "$work/train" --output "$work/cifar.h5" --val-fraction 0.2 --seed 1
fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
rate() { sed -n 's/.* \([0-9][0-9]*\) img\/s.*/\1/p' | tail -1; }
common=(--train "$work/cifar.h5" --epochs 1 --steps-per-epoch 200 --batch-size 64 --progress never)

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; seed_cnn, batch 64 per rank, 200 steps"
printf '%6s %8s %12s %12s %12s %10s\n' ranks threads ddl_train pytorch_ddp ceiling ddl/ddp
for r in $ranks_list; do
  t=$(( cores / r > 0 ? cores / r : 1 ))
  ddl=$(mpirun --oversubscribe -np "$r" --bind-to core --map-by "slot:PE=$t" build/launch/ddl_train "${common[@]}" --threads "$t" "$@" 2>&1 | rate)
  ddp=$(/usr/bin/python3 "$shared/peers/pytorch_ddp_bench.py" --ranks "$r" --threads "$t" --batch 64 --steps 200 | sed -n 's/.*imgs\/s=\([0-9]*\).*/\1/p')
  pids=()
  for i in $(seq 0 $((r - 1))); do
    first=$(( i * t )); last=$(( first + t - 1 ))
    taskset -c "$first-$last" build/launch/ddl_train "${common[@]}" --threads "$t" > "$work/ceiling.$i.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  ceiling=$(for i in $(seq 0 $((r - 1))); do rate < "$work/ceiling.$i.txt"; done | awk '{s += $1} END {print s}')
  printf '%6s %8s %12s %12s %12s %10s\n' "$r" "$t" "$ddl" "$ddp" "$ceiling" "$(awk -v a="$ddl" -v b="$ddp" 'BEGIN {printf "%.2fx", a / b}')"
done
