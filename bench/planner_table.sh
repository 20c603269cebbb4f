#!/usr/bin/env bash
# Baligodugula and Amsaad's Table I (2025) on our machines (issue 14): one model with 100 classes trained for
# a fixed number of steps as one rank, data parallel (--strategy data), pipeline (--strategy pipeline), every
# grid D x S x T of the ranks held fixed (the best of them is the "best static layout"), data parallelism with
# its state sharded (ZeRO's stages 1-3) and with activations recomputed (issue 32), and --strategy auto.
# Global batch 32 (30 on 3 ranks), SGD with momentum, one thread per rank; each row is the second epoch (the
# first builds the primitives; an auto run may re-plan at its end). Columns: images/s, the largest rank's peak
# memory, the communication share (all-reduce wait, or a pipeline's wait), the step measured and planned, how
# far the measured step is off the planned one, the final training loss. DDL_ROUNDS=N runs every layout N
# times, in turn, and gives each figure's median and the ranges of the step measured and planned: a step of a
# few milliseconds moves by more than 10% between runs, and so does the probe's.
#   bash bench/planner_table.sh MODEL [RANKS] [STEPS] [DATA.h5]        ranks on this machine
#   DDL_HOSTS=3 bash bench/planner_table.sh MODEL 3 [STEPS] [DATA.h5]  3 network-namespace hosts over TCP,
#                                                                     one rank each (root)
# DDL_RUN_TIMEOUT=S stops any one run after S seconds (its row: failed). Each row is printed as soon as its
# last round has run, so a job cut short keeps the rows it took.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?model}
ranks=${2:-2}
steps=${3:-4}
data=${4:-runs/sample/train.h5}
hosts=${DDL_HOSTS:-0}
[ "$hosts" -eq 0 ] || ranks=$hosts
rounds=${DDL_ROUNDS:-1}
limit=()
[ -z "${DDL_RUN_TIMEOUT:-}" ] || limit=(timeout --foreground -k 5 "$DDL_RUN_TIMEOUT")
[ -x build/launch/ddl_train ] || bash launch/setup.sh
[ -f "$data" ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
common=(--model "$model" --num-classes 100 --train "$(realpath "$data")" --epochs 2 --steps-per-epoch "$steps"
        --optimizer sgd --momentum 0.9 --lr 0.01 --progress never --seed 1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

launch() {  # ddl_train ARGS on the ranks: its stdout
  if [ "$hosts" -gt 0 ]; then
    rm -rf "$work/job"  # a run that fails early must not show the last one's output
    bash tests/launch/three_hosts.sh run "$work/job" --threads 1 "$@" > /dev/null
    cat "$work/job/out.txt" "$work/job/err.txt"
  else
    "${limit[@]}" mpirun --oversubscribe -np "$ranks" build/launch/ddl_train --threads 1 "$@" 2>&1
  fi
}

field() { echo "$1" | sed -n "s|.*$2.*|\1|p"; }
# One run's figures on a line: img/s, peak MB, communication %, step measured, step planned, loss (- where
# absent, "failed" where the run printed no second epoch).
figures() {
  local line wait
  line=$(grep '^epoch 2/2' "$1" | tail -1 || true)
  if [ -z "$line" ]; then echo failed; return; fi
  wait=$(field "$line" 'comm wait \([0-9.]*\)%')
  [ -n "$wait" ] || wait=$(field "$line" 'pipeline wait \([0-9.]*\)%')
  for value in "$(field "$line" ' \([0-9]*\) img/s')" "$(field "$line" 'peak RSS \([0-9]*\) MB')" "$wait" \
      "$(field "$line" 'step \([0-9.]*\) s')" "$(field "$line" 'planned \([0-9.]*\) s')" \
      "$(field "$line" 'train loss \([0-9.]*\)')"; do
    printf '%s ' "${value:--}"
  done
  echo
}
row() {  # LABEL, then the outputs of its rounds: each figure's median, and the ranges of the step measured and planned
  local label=$1 out all failed
  shift
  all=$(for out in "$@"; do figures "$out"; done)
  failed=$(grep -c failed <<< "$all" || true)
  if [ "$failed" -gt 0 ]; then
    printf '%-34s %s\n' "$label" "failed in $failed of $# rounds: $(grep -h -m1 -i error "$@" | head -1 || true)"
    return
  fi
  echo "$all" | awk -v label="$label" -v rounds=$# '
    { for (c = 1; c <= NF; c++) v[c, NR] = $c }
    function median(c,   i, j, n, t, a) {
      for (i = 1; i <= rounds; i++) if (v[c, i] == "-") return "-"
      for (i = 1; i <= rounds; i++) a[i] = v[c, i] + 0
      for (i = 2; i <= rounds; i++)  # insertion sort
        for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      n = int((rounds + 1) / 2)
      return rounds % 2 ? a[n] : (a[n] + a[n + 1]) / 2
    }
    function range(c,   i, x, lo, hi) {
      lo = hi = v[c, 1] + 0
      for (i = 2; i <= rounds; i++) { x = v[c, i] + 0; if (x < lo) lo = x; if (x > hi) hi = x }
      return lo "-" hi
    }
    END {
      off = "-"
      if (median(4) != "-" && median(5) != "-") {  # the median of the rounds measured / planned
        for (i = 1; i <= rounds; i++) v[7, i] = v[5, i] > 0 ? v[4, i] / v[5, i] : "-"
        if (median(7) != "-") off = sprintf("%+.0f%%", 100 * (median(7) - 1))
      }
      printf "%-34s %8s %9s %7s %9s %9s %7s %8s", label, median(1), median(2), median(3), median(4), median(5), off,
        median(6)
      if (rounds > 1 && median(4) != "-") printf "   step %s s", range(4)
      if (rounds > 1 && median(5) != "-") printf ", planned %s s", range(5)
      printf "\n"
    }'
  grep -h '^re-plan' "$@" |
    sed 's/.*: \(.*\) is predicted.*/    (re-planned at the end of epoch 1: \1)/' | sort -u || true
  grep -h '^  chosen ' "$@" | sed 's/^  chosen */    layout: /' | sort -u || true
}

where="$ranks ranks on one machine"
[ "$hosts" -eq 0 ] || where="$hosts network-namespace hosts over TCP, 1 rank each"
threads=$((ranks < $(nproc) ? ranks : $(nproc)))
global=$((32 / ranks * ranks))
# The layouts, each a label and its options; "one" runs as one rank with $threads threads, the rest on the
# ranks.
labels=("one rank ($threads threads)" "--strategy data" "--strategy pipeline")
batch="--batch-size $((global / ranks))"
options=("one --batch-size $global" "$batch --strategy data" "$batch --strategy pipeline")
# Every grid D x S x T held fixed for the whole run: the planner picks only its cuts and split layers, and
# says what step it predicts.
for s in $(seq 1 "$ranks"); do
  for t in $(seq 1 "$ranks"); do
    [ $((ranks % (s * t))) -eq 0 ] || continue
    d=$((ranks / (s * t)))
    m=$([ "$s" -gt 1 ] && echo 4 || echo 1)
    while [ $((global / d % m)) -ne 0 ]; do m=$((m / 2)); done  # 3 ranks train 30 images: 2 micro-batches
    labels+=("static ${d} x ${s} x ${t}, M=$m")
    held="--strategy auto --shard-state 0 --replan-every never"
    options+=("$batch $held --pipeline-stages $s --micro-batches $m --tensor-parallel $t")
  done
done
# Issue 32's axes on data parallelism held: the state sharded at each of ZeRO's stages, and activations
# recomputed, each with its planned step.
data_held="--strategy auto --replan-every never --pipeline-stages 1 --tensor-parallel 1"
for stage in 1 2 3; do
  labels+=("data, --shard-state $stage")
  options+=("$batch $data_held --shard-state $stage")
done
labels+=("data, --recompute")
options+=("$batch $data_held --shard-state 0 --recompute")
labels+=("--strategy auto")
options+=("$batch --strategy auto")

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $model, 100 classes," \
  "global batch $global, $where, $steps steps an epoch, $rounds round(s)"
printf '%-34s %8s %9s %7s %9s %9s %7s %8s\n' layout img/s "peak MB" "comm %" "step s" "planned" "off" loss
# Rounds run every layout in turn, so that what drifts on the machine meets every layout alike; a layout's
# row follows its last round.
for r in $(seq 1 "$rounds"); do
  for i in "${!options[@]}"; do
    read -ra opts <<< "${options[$i]}"
    if [ "${opts[0]}" = one ]; then
      "${limit[@]}" build/launch/ddl_train "${common[@]}" "${opts[@]:1}" --threads "$threads" > "$work/$i.$r" 2>&1 || true
    else
      launch "${common[@]}" "${opts[@]}" > "$work/$i.$r" || true
    fi
    [ "$r" -eq "$rounds" ] || continue
    outputs=()
    for k in $(seq 1 "$rounds"); do outputs+=("$work/$i.$k"); done
    row "${labels[$i]}" "${outputs[@]}"
  done
done
