#!/usr/bin/env bash
# Split layers against data parallelism and a pipeline for one model at 224x224 (issue 13): images/s, the
# bytes one rank sends per step and the largest rank's peak memory of `ddl_train` on 2 ranks laid out as
# 2 x 1 x 1 (data parallel), 1 x 1 x 2 (the classifier split: convolutions data parallel, dense layers
# split; for a vision transformer the blocks split, the two ranks sharing each batch), 1 x 2 x 1 (a
# pipeline of 4 micro-batches), one thread per rank, a global batch of 64. Run twice: both ranks on this machine, then one rank on each of two "hosts"
# (network namespaces, Open MPI over TCP, bench/two_hosts.sh: root only), where the link is slow. The
# second epoch of each run is reported (the first builds the primitives).
#   bash bench/split_layers.sh [MODEL] [steps] [data.h5] [more ddl_train options, e.g. --image-size 112]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-alexnet}
steps=${2:-3}
data=${3:-runs/sample/train.h5}
shift $(($# < 3 ? $# : 3))
[ -x build/launch/ddl_train ] || bash launch/setup.sh
[ -f "$data" ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
data=$(realpath "$data")
common=(--model "$model" --train "$data" --epochs 2 --steps-per-epoch "$steps" --optimizer sgd --lr 0.01
        --progress never --threads 1 --bucket-mb 0 "$@")
split="split 1x1x2|--batch-size 32 --tensor-parallel 2"
[[ $model == vit* ]] && split="split blocks 1x1x2|--batch-size 64 --tensor-parallel 2 --tensor-split blocks"
layouts=("data parallel 2x1x1|--batch-size 32"
         "$split"
         "pipeline 1x2x1 M=4|--batch-size 64 --pipeline-stages 2 --micro-batches 4")

# The figures of one epoch line: img/s, bytes sent per rank and step, peak MB.
report() {
  local name=$1 line=$2 seconds mb tensor
  seconds=$(echo "$line" | sed -n 's/.* time \([0-9.]*\) s .*/\1/p')
  mb=$(echo "$line" | sed -n 's/.* \([0-9.]*\) MB all-reduced\/step.*/\1/p')
  tensor=$(echo "$line" | sed -n 's/.*tensor group \([0-9]*\) bytes\/step.*/\1/p')
  # An all-reduce of B bytes over 2 ranks sends B per rank (a ring's 2 (R - 1) / R).
  printf '%-24s %8.1f %14s %10s\n' "$name" "$(awk -v t="$seconds" -v n=$((64 * steps)) 'BEGIN {print n / t}')" \
    "$(awk -v mb="${mb:-0}" -v t="${tensor:-0}" 'BEGIN {if (mb + t == 0) print "-"; else printf "%.2f", mb + t / 1048576}')" \
    "$(echo "$line" | sed -n 's/.*peak RSS \([0-9]*\) MB.*/\1/p')"
}

run_all() {  # launcher...
  printf '%-24s %8s %14s %10s\n' layout img/s "MB sent/step" "peak MB"
  for entry in "${layouts[@]}"; do
    local name=${entry%%|*} args=${entry#*|}
    # shellcheck disable=SC2086
    report "$name" "$("$@" build/launch/ddl_train "${common[@]}" $args | grep '^epoch 2/2' | tail -1)"
  done
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $model ${*:-224x224}, 2 ranks x 1 thread, global batch 64"
echo "pipeline bytes are activation messages, not counted here"
echo "-- one machine (shared memory)"
run_all mpirun --oversubscribe -np 2
if [ "$(id -u)" -eq 0 ]; then
  echo "-- two hosts over TCP (network namespaces)"
  run_all bash bench/two_hosts.sh 1
fi
