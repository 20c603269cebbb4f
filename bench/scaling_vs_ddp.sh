#!/usr/bin/env bash
# Data-parallel scaling of seed_cnn: images/s of `mpirun -np R ddl_train` for each R, next to PyTorch DDP
# (../shared/peers/pytorch_ddp_bench.py, gloo) with the same ranks and threads in the same run, and next to
# the machine's ceiling: R independent single-rank ddl_train processes started at once, each bound to its
# own cores, their images/s summed (no communication at all). Batch 64 per rank, 200 steps.
#   bash bench/scaling_vs_ddp.sh "1 2 4 8 16" [extra ddl_train options]
# Environment (defaults: the seed_cnn run above):
#   DDL_MODEL=resnet50      another built-in model at its own size; its peer is bench/torch_model_ddp.py
#                           (torchvision's model, random images); ddl's figure is then the second epoch's
#   DDL_PRECISION=bf16      ddl_train --precision bf16, and the peer under torch.autocast bf16
#   DDL_BATCH=B             images per rank a step (64); DDL_GLOBAL_BATCH=G instead: G / R per rank
#   DDL_STEPS=S             steps an epoch (200); DDL_EPOCHS=E epochs (1 for seed_cnn, else 2; the last counts)
#   DDL_THREADS=T           threads per rank (0, the default: the cores / R)
#   DDL_CEILING=0           no ceiling column; DDL_PEER=0: no PyTorch column
#   DDL_BIND=0              no binding (mpirun --bind-to none, no taskset): where the machine refuses it
#   DDL_DATA=FILE.h5        the training set (default runs/bench/cifar.h5, imported from ../shared's CIFAR-10)
#   DDL_PYTHON=python3      the Python that has torch (/usr/bin/python3)
#   DDL_RUN_TIMEOUT=S       stop any one run after S seconds (its figure: -)
# Columns: ranks, threads a rank, ddl's images/s, PyTorch's, the ceiling's, ddl / PyTorch, ddl / ceiling,
# and ddl's all-reduce wait share (comm %).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks_list=${1:-"1 2"}
shift || true
shared=${DDL_SHARED:-../shared}
model=${DDL_MODEL:-seed_cnn}
precision=${DDL_PRECISION:-f32}
steps=${DDL_STEPS:-200}
epochs=${DDL_EPOCHS:-$([ "$model" = seed_cnn ] && echo 1 || echo 2)}
python=${DDL_PYTHON:-/usr/bin/python3}
bind=${DDL_BIND:-1}
limit=()
[ -z "${DDL_RUN_TIMEOUT:-}" ] || limit=(timeout --foreground -k 5 "$DDL_RUN_TIMEOUT")
work=runs/bench
cores=$(nproc)
mkdir -p "$work"
[ -x build/launch/ddl_train ] || bash launch/setup.sh
data=${DDL_DATA:-$work/cifar.h5}
if [ ! -f "$data" ]; then
  [ -d "$work/train" ] || tar xzf "$shared/datasets/cifar10/train.tar.gz" -C "$work"
  build/launch/ddl_data import --from "$work/train" --output "$data" --val-fraction 0.2 --seed 1
fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# The last epoch's images/s, from its time (one decimal: ResNet-50 trains a few images a second a core).
rate() {
  grep '^epoch ' | tail -1 | sed -n 's/.* time \([0-9.]*\) s .* img\/s.*/\1/p' |
    awk -v n="$1" '$1 > 0 {printf "%.1f", n / $1}'
}
comm() { grep '^epoch ' | tail -1 | sed -n 's/.*comm wait \([0-9.]*\)%.*/\1/p'; }
common=(--model "$model" --precision "$precision" --train "$data" --epochs "$epochs" --steps-per-epoch "$steps"
        --progress never)
# torchvision's models, as the peer builds them: 1000 classes
[ "$model" = seed_cnn ] || common+=(--num-classes 1000 --optimizer sgd --momentum 0.9 --lr 0.01)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

batch_note="batch ${DDL_BATCH:-64} per rank"
[ -z "${DDL_GLOBAL_BATCH:-}" ] || batch_note="global batch $DDL_GLOBAL_BATCH"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; $model $precision, $batch_note, $steps steps" \
  "(epoch $epochs of $epochs)"
printf '%6s %8s %12s %12s %12s %10s %10s %7s\n' ranks threads ddl_train pytorch_ddp ceiling ddl/ddp ddl/ceil comm%
for r in $ranks_list; do
  t=${DDL_THREADS:-0}
  [ "$t" -gt 0 ] || t=$(( cores / r > 0 ? cores / r : 1 ))
  b=${DDL_BATCH:-64}
  [ -z "${DDL_GLOBAL_BATCH:-}" ] || b=$(( DDL_GLOBAL_BATCH / r ))
  images=$(( r * b * steps ))
  placement=(--bind-to none)
  [ "$bind" = 0 ] || placement=(--bind-to core --map-by "slot:PE=$t")
  "${limit[@]}" mpirun --oversubscribe -np "$r" "${placement[@]}" build/launch/ddl_train "${common[@]}" \
    --batch-size "$b" --threads "$t" "$@" > "$out/ddl.$r" 2>&1 || true
  ddl=$(rate "$images" < "$out/ddl.$r")
  wait_share=$(comm < "$out/ddl.$r")
  ddp=
  if [ "${DDL_PEER:-1}" != 0 ]; then
    if [ "$model" = seed_cnn ]; then
      ddp=$("${limit[@]}" "$python" "$shared/peers/pytorch_ddp_bench.py" --ranks "$r" --threads "$t" --batch "$b" \
              --steps "$steps" 2>&1 | sed -n 's/.*imgs\/s=\([0-9]*\).*/\1/p' || true)
    else
      ddp=$("${limit[@]}" "$python" bench/torch_model_ddp.py "$model" "$r" "$t" "$b" "$steps" \
              $([ "$precision" = bf16 ] && echo --bf16) 2>&1 | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p' || true)
    fi
  fi
  ceiling=
  if [ "${DDL_CEILING:-1}" != 0 ]; then
    pids=()
    for i in $(seq 0 $((r - 1))); do
      first=$(( i * t % cores )); last=$(( first + t - 1 ))
      pin=()
      [ "$bind" = 0 ] || pin=(taskset -c "$first-$last")
      "${limit[@]}" "${pin[@]}" build/launch/ddl_train "${common[@]}" --batch-size "$b" --threads "$t" \
        > "$out/ceiling.$r.$i" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}" || true
    ceiling=$(for i in $(seq 0 $((r - 1))); do rate $(( b * steps )) < "$out/ceiling.$r.$i"; echo; done |
                awk -v r="$r" 'NF {s += $1; n++} END {if (n == r) printf "%.1f", s}')
  fi
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a > 0 && b > 0) printf "%.2fx", a / b; else printf "-"}'; }
  share() { awk -v a="$1" -v b="$2" 'BEGIN {if (a > 0 && b > 0) printf "%.0f%%", 100 * a / b; else printf "-"}'; }
  [ -n "$ddl" ] || { echo "ddl_train failed at $r ranks: $(grep -m1 -i -E 'error|what\(\)' "$out/ddl.$r" || tail -1 "$out/ddl.$r")" >&2; }
  printf '%6s %8s %12s %12s %12s %10s %10s %7s\n' "$r" "$t" "${ddl:--}" "${ddp:--}" "${ceiling:--}" \
    "$(ratio "$ddl" "$ddp")" "$(share "$ddl" "$ceiling")" "${wait_share:--}"
done
