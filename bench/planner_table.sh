#!/usr/bin/env bash
# Baligodugula and Amsaad's Table I (2025) on our machines (issue 14): one model with 100 classes trained for a fixed number of
# steps as one rank, data parallel (--strategy data), pipeline (--strategy pipeline), every grid D x S x T
# of the ranks set by hand (the best of them is the "best static layout"), and --strategy auto. Global batch
# 32, SGD with momentum, one thread per rank; each row is the second epoch (the first builds the
# primitives; an auto run may re-plan at its end). Columns: images/s, the largest rank's peak memory, the
# communication share (all-reduce wait, or a pipeline's wait), the step measured and planned, the final
# training loss.
#   bash bench/planner_table.sh MODEL [RANKS] [STEPS] [DATA.h5]        ranks on this machine
#   DDL_HOSTS=3 bash bench/planner_table.sh MODEL 3 [STEPS] [DATA.h5]  3 network-namespace hosts over TCP,
#                                                                     one rank each (root)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?model}
ranks=${2:-2}
steps=${3:-4}
data=${4:-runs/sample/train.h5}
hosts=${DDL_HOSTS:-0}
[ -x build/launch/ddl_train ] || bash launch/setup.sh
[ -f "$data" ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
split=classifier
case "$model" in vit*) split=blocks ;; esac
common=(--model "$model" --num-classes 100 --train "$(realpath "$data")" --epochs 2 --steps-per-epoch "$steps"
        --optimizer sgd --momentum 0.9 --lr 0.01 --progress never --seed 1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

launch() {  # ddl_train ARGS on the ranks: its stdout
  if [ "$hosts" -gt 0 ]; then
    bash tests/launch/three_hosts.sh run "$work/job" --threads 1 "$@" > /dev/null
    cat "$work/job/out.txt" "$work/job/err.txt"
  else
    mpirun --oversubscribe -np "$ranks" build/launch/ddl_train --threads 1 "$@" 2>&1
  fi
}

field() { echo "$1" | sed -n "s|.*$2.*|\1|p"; }
row() {  # LABEL, then the output of a run
  local label=$1 out line
  out=$(cat)
  line=$(echo "$out" | grep '^epoch 2/2' | tail -1 || true)
  if [ -z "$line" ]; then
    printf '%-34s %s\n' "$label" "failed: $(echo "$out" | grep -m1 -i error || true)"
    return
  fi
  local wait
  wait=$(field "$line" 'comm wait \([0-9.]*\)%')
  [ -n "$wait" ] || wait=$(field "$line" 'pipeline wait \([0-9.]*\)%')
  printf '%-34s %8s %9s %7s %9s %9s %8s\n' "$label" "$(field "$line" ' \([0-9]*\) img/s')" \
    "$(field "$line" 'peak RSS \([0-9]*\) MB')" "${wait:--}" "$(field "$line" 'step \([0-9.]*\) s')" \
    "$(field "$line" 'planned \([0-9.]*\) s')" "$(field "$line" 'train loss \([0-9.]*\)')"
  local switched
  switched=$(echo "$out" | grep -m1 '^re-plan' | sed 's/.*: \(.*\) is predicted.*/\1/' || true)
  [ -z "$switched" ] || printf '    (re-planned at the end of epoch 1: %s)\n' "$switched"
  echo "$out" | grep -m1 '^  chosen ' | sed 's/^  chosen */    layout: /' || true
}

where=$([ "$hosts" -gt 0 ] && echo "$hosts network-namespace hosts over TCP, 1 rank each" || echo "$ranks ranks on one machine")
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $model, 100 classes, global batch 32, $where, $steps steps an epoch"
printf '%-34s %8s %9s %7s %9s %9s %8s\n' layout img/s "peak MB" "comm %" "step s" "planned" loss
threads=$((ranks < $(nproc) ? ranks : $(nproc)))
build/launch/ddl_train "${common[@]}" --batch-size 32 --threads "$threads" 2>&1 | row "one rank ($threads threads)"
launch "${common[@]}" --batch-size $((32 / ranks)) --strategy data | row "--strategy data"
launch "${common[@]}" --batch-size $((32 / ranks)) --strategy pipeline | row "--strategy pipeline"
for s in $(seq 1 "$ranks"); do
  for t in $(seq 1 "$ranks"); do
    [ $((ranks % (s * t))) -eq 0 ] || continue
    d=$((ranks / (s * t)))
    m=$([ "$s" -gt 1 ] && echo 4 || echo 1)
    # A classifier split deals the batch among D x T ranks, a blocks split among the D replicas' groups.
    per=$([ "$t" -gt 1 ] && [ "$split" = classifier ] && echo $((d * t)) || echo "$d")
    [ $((32 % per)) -eq 0 ] && [ $((32 / per % m)) -eq 0 ] || continue
    launch "${common[@]}" --batch-size $((32 / per)) --pipeline-stages "$s" --micro-batches "$m" \
      --tensor-parallel "$t" --tensor-split "$split" | row "static ${d} x ${s} x ${t}, M=$m"
  done
done
launch "${common[@]}" --batch-size $((32 / ranks)) --strategy auto | row "--strategy auto"
