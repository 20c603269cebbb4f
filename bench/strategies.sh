#!/usr/bin/env bash
# Data parallel, pipeline and hybrid grids side by side for one model at 224x224 on one machine (issue 5):
# images/s and the largest rank's peak memory of `ddl_train` with R ranks as R x 1 (data parallel), 1 x R
# (pipeline) and every other grid D x S with D * S = R, one thread per rank, a global batch of 32 (per
# replica 32 / D, in M micro-batches), next to PyTorch DDP with the same torchvision model, ranks and
# threads in the same run. The second epoch of each run is reported (the first builds the primitives).
#   bash bench/strategies.sh MODEL RANKS [micro-batches] [steps] [data.h5]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-vgg16}
ranks=${2:-2}
micro=${3:-4}
steps=${4:-3}
data=${5:-runs/sample/train.h5}
[ -x build/launch/ddl_train ] || bash launch/setup.sh
[ -f "$data" ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
common=(--model "$model" --train "$data" --epochs 2 --steps-per-epoch "$steps" --optimizer sgd --lr 0.01
        --progress never --threads 1 --bucket-mb 0)
second_epoch() { grep '^epoch 2/2' | tail -1; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $model 224x224, global batch 32, $ranks ranks x 1 thread"
printf '%-22s %10s %12s\n' layout img/s "peak MB"
for s in $(seq 1 "$ranks"); do
  [ $((ranks % s)) -eq 0 ] || continue
  d=$((ranks / s))
  [ $((32 % d)) -eq 0 ] || continue
  m=$([ "$s" -gt 1 ] && echo "$micro" || echo 1)
  [ $(((32 / d) % m)) -eq 0 ] || continue
  line=$(mpirun --oversubscribe -np "$ranks" build/launch/ddl_train "${common[@]}" --batch-size $((32 / d)) \
           --pipeline-stages "$s" --micro-batches "$m" | second_epoch)
  seconds=$(echo "$line" | sed -n 's/.*time \([0-9.]*\) s .*/\1/p')
  printf '%-22s %10.1f %12s\n' "ddl ${d}x${s} M=$m" "$(awk -v t="$seconds" -v n=$((32 * steps)) 'BEGIN {print n / t}')" \
    "$(echo "$line" | sed -n 's/.*peak RSS \([0-9]*\) MB.*/\1/p')"
done
/usr/bin/python3 bench/torch_model_ddp.py "$model" "$ranks" 1 $((32 / ranks)) "$steps" |
  sed -n 's/.*: \([0-9.]*\) images\/s, peak RSS \([0-9]*\) MB.*/\1 \2/p' |
  { read -r rate peak; printf '%-22s %10.1f %12s\n' "pytorch ddp ${ranks}x1" "$rate" "$peak"; }
