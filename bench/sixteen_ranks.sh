#!/usr/bin/env bash
# Issue 56's figures in one call on the 16-core machine (../shared/docs/measuring.md), each part by the
# script that already takes it, every output under OUTDIR, and OUTDIR/summary.md: the tables ready for
# docs/performance.md, with the machine, the date and the command.
#   1. data parallelism at 1, 2, 4, 8, 16 ranks, one thread a rank (bench/scaling_vs_ddp.sh): ResNet-50 at
#      224 in f32 and in bf16, and seed_cnn; ddl_train, PyTorch DDP (gloo) with the same ranks, threads and
#      batch, and the ceiling (as many independent single-rank runs at once)
#   2. all-reduce bus bandwidth at 16 ranks, ring, hier and MPI_Allreduce (build/bench/allreduce_bandwidth,
#      4 KiB to 256 MiB), and as training uses it: ResNet-50's 98 MB of gradients (1000 classes) at 16
#      ranks with MPI_Allreduce and hier after backward, and hier in 25 MB buckets during backward
#   3. seeds/002's processes against threads (bench/scaling_vs_ddp.sh with the cores shared out): AlexNet
#      at 224, global batch 32, as 1 x 16, 4 x 4 and 16 x 1 ranks x threads next to one rank of one thread,
#      ddl and PyTorch DDP; and ResNet-50 as 1 rank x 16 threads, for PyTorch's best configuration
#   4. seeds/004's Table I at 16 ranks (bench/planner_table.sh vgg16_cifar 16 8): --strategy auto against
#      every static layout (23 runs), the planned step beside the measured one
# Where the figures go: OUTDIR/part1.txt ... part4.txt (the scripts' own tables), OUTDIR/summary.md, and
# OUTDIR/sixteen.log (the machine, the versions, every line printed). Seven files at most: the device tool
# brings back eight.
#
# On the 16-core machine: build here, `bash bench/carry.sh` (dist/ddl-bin.tar.xz: the executables and the
# libraries they need; dist/peers: ../shared's PyTorch peer, as ../shared does not travel), then in one
# run carrying dist:
#   bash bench/sixteen_ranks.sh "$OUT"
# Where build/launch/ddl_train is missing and dist/ddl-bin.tar.xz is there, it is unpacked into a
# temporary folder and build/launch and build/bench get wrappers that run it with its libraries (Python
# sees none of them). Here, at 2 ranks, to rehearse:
#   DDL_MAX_RANKS=2 bash bench/sixteen_ranks.sh runs/sixteen/out
# Environment. The sizes are chosen for about 8 minutes on 16 Xeon cores, one run each (no medians: the
# device's 15 minutes hold one call), from the 2-core rehearsal's times: setup 10 s, part 2 about 50 s,
# part 1 about 240 s (15 ddl runs, 15 PyTorch runs of up to 16 processes, 15 ceilings), part 3 about 65 s,
# part 4 about 120 s (ResNet-50 takes twice VGG16's time a layout there: DDL_TABLE_MODEL=resnet50_cifar
# DDL_TABLE_STEPS=4 DDL_PARTS=4 in a second call, if time is left).
#   DDL_MAX_RANKS=16     the largest rank count (the counts are 1 2 4 8 16 up to it)
#   DDL_PARTS="2 1 3 4"  the parts to run, in this order (the shortest and most wanted first)
#   DDL_DEADLINE=540     seconds after the start after which no run starts and any running one is stopped
#                        (the device tool stops a command at 600 s); DDL_RUN_TIMEOUT=150: one run's limit
#   DDL_R50_BATCH=4 DDL_R50_STEPS=2  ResNet-50's images per rank and steps an epoch (2 epochs, the second
#                        counts: one thread trains ResNet-50 at 224 at a few images a second)
#   DDL_SEED_STEPS=50    seed_cnn's steps an epoch (batch 64 a rank, 2 epochs; PyTorch: 20 more to warm up)
#   DDL_ALEX_STEPS=3     AlexNet's steps an epoch in part 3
#   DDL_TABLE_MODEL=vgg16_cifar DDL_TABLE_STEPS=8  part 4's model and steps an epoch
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
max=${DDL_MAX_RANKS:-16}
parts=${DDL_PARTS:-"2 1 3 4"}
deadline=${DDL_DEADLINE:-540}
run_timeout=${DDL_RUN_TIMEOUT:-150}
r50_batch=${DDL_R50_BATCH:-4}
r50_steps=${DDL_R50_STEPS:-2}
seed_steps=${DDL_SEED_STEPS:-50}
alex_steps=${DDL_ALEX_STEPS:-3}
table_model=${DDL_TABLE_MODEL:-vgg16_cifar}
table_steps=${DDL_TABLE_STEPS:-8}
ranks_list=$(for r in 1 2 4 8 16; do [ "$r" -gt "$max" ] || printf '%s ' "$r"; done)
ranks_list=${ranks_list% }
shared_ranks=$(for r in 1 4 "$max"; do [ "$r" -gt "$max" ] || echo "$r"; done | sort -nu | tr '\n' ' ')
scaling() { bash bench/scaling_vs_ddp.sh "$@"; }
train16() {  # ResNet-50 f32 on $max ranks, the all-reduce and buckets given: one row of part 2's second table
  local label=$1 line
  shift
  line=$(timeout --foreground -k 5 "$run_timeout" mpirun --oversubscribe -np "$max" "${placement[@]}" \
           build/launch/ddl_train --model resnet50 --train "$DDL_DATA" --epochs 2 --steps-per-epoch "$r50_steps" \
           --batch-size "$r50_batch" --threads 1 --num-classes 1000 --optimizer sgd --lr 0.01 --progress never "$@" 2>&1 |
         grep '^epoch 2/2' | tail -1)
  printf '%-24s %10s %8s %10s\n' "$label" \
    "$(echo "$line" | sed -n 's/.* time \([0-9.]*\) s .*/\1/p' | awk -v n=$((max * r50_batch * r50_steps)) '$1 > 0 {printf "%.1f", n / $1}')" \
    "$(echo "$line" | sed -n 's/.*comm wait \([0-9.]*\)%.*/\1/p')" \
    "$(echo "$line" | sed -n 's/.*  \([0-9.]*\) MB all-reduced.*/\1/p')"
}
part2() {
  echo "## all-reduce bus bandwidth, $max ranks ($DDL_BIND binding)"
  timeout --foreground -k 5 "$run_timeout" mpirun --oversubscribe -np "$max" "${placement[@]}" \
    build/bench/allreduce_bandwidth 256
  echo "## as training uses it: resnet50 f32 224, $max ranks x 1 thread, batch $r50_batch a rank, epoch 2 of 2 ($r50_steps steps)"
  printf '%-24s %10s %8s %10s\n' all-reduce img/s comm% MB/step
  train16 "mpi, after backward" --allreduce mpi --bucket-mb 0
  train16 "hier, after backward" --allreduce hier --bucket-mb 0
  train16 "hier, 25 MB buckets" --allreduce hier --bucket-mb 25
}
part1() {
  echo "## resnet50 f32"
  DDL_MODEL=resnet50 DDL_PRECISION=f32 DDL_BATCH=$r50_batch DDL_STEPS=$r50_steps DDL_THREADS=1 scaling "$ranks_list"
  echo "## resnet50 bf16"
  DDL_MODEL=resnet50 DDL_PRECISION=bf16 DDL_BATCH=$r50_batch DDL_STEPS=$r50_steps DDL_THREADS=1 scaling "$ranks_list"
  echo "## seed_cnn f32"
  DDL_MODEL=seed_cnn DDL_EPOCHS=2 DDL_BATCH=64 DDL_STEPS=$seed_steps DDL_THREADS=1 scaling "$ranks_list"
}
part3() {
  echo "## alexnet 1x1"
  DDL_MODEL=alexnet DDL_GLOBAL_BATCH=32 DDL_STEPS=$alex_steps DDL_THREADS=1 DDL_CEILING=0 scaling 1
  echo "## alexnet cores shared out"
  DDL_MODEL=alexnet DDL_GLOBAL_BATCH=32 DDL_STEPS=$alex_steps DDL_THREADS=0 DDL_CEILING=0 scaling "$shared_ranks"
  echo "## resnet50 f32 one rank, all cores"
  DDL_MODEL=resnet50 DDL_BATCH=$((r50_batch * max)) DDL_STEPS=$r50_steps DDL_THREADS=$max DDL_CEILING=0 scaling 1
}
part4() {
  echo "## $table_model $max ranks, $table_steps steps"
  bash bench/planner_table.sh "$table_model" "$max" "$table_steps" "$DDL_DATA"
}
if [ "${1:-}" = --part ]; then  # one part, run again by this script under timeout with the set-up's environment
  placement=(--bind-to none)
  case ${DDL_BIND:-0} in
    core) placement=(--bind-to core --map-by slot:PE=1) ;;
    hwthread) placement=(--use-hwthread-cpus --bind-to hwthread --map-by slot:PE=1) ;;
  esac
  max=$DDL_MAX_RANKS cores=$(nproc)
  "part$2"
  exit
fi

out=${1:-${OUT:-runs/sixteen/out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
command_line="$(env | grep -E '^DDL_' | sort | tr '\n' ' ')bash bench/sixteen_ranks.sh ${1:-}"
log=$out/sixteen.log
rm -f "$log" "$out"/part[1-4].txt "$out/summary.md"
exec > >(tee -a "$log") 2>&1
start=$SECONDS
say() { printf '[%4ds] %s\n' $((SECONDS - start)) "$*"; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# --- ddl's executables: the build here, or the carried ones behind wrappers --------------------------------
if [ ! -x build/launch/ddl_train ]; then
  [ -f dist/ddl-bin.tar.xz ] || { say "no build/launch/ddl_train and no dist/ddl-bin.tar.xz (bash bench/carry.sh)"; exit 1; }
  carried=1 unpacked=$(mktemp -d /tmp/ddl-bin.XXXXXX)
  { xz -dc dist/ddl-bin.tar.xz 2> /dev/null ||  # Python's lzma where xz is missing
      "${DDL_PYTHON:-python3}" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' \
        dist/ddl-bin.tar.xz; } | tar -C "$unpacked" -xf -
  known=$(ldconfig -p 2> /dev/null)
  for f in "$unpacked"/fallback/*; do  # only where that machine has no library of the name
    grep -q "^[[:space:]]*$(basename "$f") " <<< "$known" || cp "$f" "$unpacked/lib/"
  done
  mkdir -p build/launch build/bench
  for b in ddl_train ddl_data allreduce_bandwidth; do
    dir=build/launch
    [ "$b" != allreduce_bandwidth ] || dir=build/bench
    printf '#!/bin/sh\nexport LD_LIBRARY_PATH=%s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\nexec %s/bin/%s "$@"\n' \
      "$unpacked" "$unpacked" "$b" > "$dir/$b"
    chmod +x "$dir/$b"
  done
  say "carried executables unpacked to $unpacked ($(ls "$unpacked/lib" | wc -l) libraries)"
  build/launch/ddl_train --help > /dev/null || { say "the carried ddl_train does not start:"; \
    LD_LIBRARY_PATH=$unpacked/lib ldd "$unpacked/bin/ddl_train" | grep 'not found'; exit 1; }
fi
# ../shared does not travel: bench/carry.sh copies its PyTorch peer into dist/peers.
[ -f "${DDL_SHARED:-../shared}/peers/pytorch_ddp_bench.py" ] || export DDL_SHARED=dist
# The Python that has torch and torchvision.
for py in "${DDL_PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$py" ] && "$py" -c 'import torch, torchvision' 2>/dev/null && { export DDL_PYTHON=$py; break; }
done
# Binding: one rank a core where mpirun and taskset can bind, else hardware threads, else none.
export DDL_BIND=0
cores=$(nproc)
for mode in core hwthread; do
  extra=(); [ "$mode" = core ] || extra=(--use-hwthread-cpus)
  if timeout 60 mpirun --oversubscribe "${extra[@]}" -np "$max" --bind-to "$mode" --map-by slot:PE=1 true \
       > /dev/null 2>&1 &&
     timeout 60 mpirun --oversubscribe "${extra[@]}" -np 1 --bind-to "$mode" --map-by "slot:PE=$cores" true \
       > /dev/null 2>&1 && taskset -c 0 true 2> /dev/null; then
    export DDL_BIND=$mode; break
  fi
done
placement=(--bind-to none)
case $DDL_BIND in
  core) placement=(--bind-to core --map-by slot:PE=1) ;;
  hwthread) placement=(--use-hwthread-cpus --bind-to hwthread --map-by slot:PE=1) ;;
esac
# The data: the 6,000-image CIFAR-10 sample in the repository (resampled to 224 for ResNet-50 and AlexNet).
data=runs/sixteen/train.h5
if [ ! -f "$data" ]; then
  mkdir -p runs/sixteen
  tar xzf data/cifar10_sample.tar.gz -C runs/sixteen
  build/launch/ddl_data import --from runs/sixteen/cifar10_sample --output "$data" --seed 1 > /dev/null
fi
export DDL_DATA=$root/$data DDL_RUN_TIMEOUT=$run_timeout DDL_MAX_RANKS=$max

model_name=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "== $(date -u '+%Y-%m-%d %H:%M UTC'); $command_line"
  echo "ddl $( ([ -n "${carried:-}" ] && cat dist/COMMIT) || git describe --always --dirty 2>/dev/null || echo "?");" \
    "$("${DDL_PYTHON:-python3}" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'no torch');" \
    "$(mpirun --version 2>/dev/null | head -1); binding: $DDL_BIND; python: ${DDL_PYTHON:-none}"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L3)'
  echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  free -g | head -2
} | sed 's/^/  /'

# Runs a part's command with what is left of the deadline, its output to OUTDIR/partN.txt as it comes.
part() {
  local file=part$1.txt left
  left=$((deadline - (SECONDS - start)))
  if [ "$left" -lt 20 ]; then
    echo "(not run: the deadline of ${deadline} s was reached)" | tee -a "$out/$file"
    return
  fi
  timeout -k 10 "$left" bash "$root/bench/sixteen_ranks.sh" --part "$1" 2>&1 | tee -a "$out/$file"
  [ "${PIPESTATUS[0]}" -ne 124 ] || echo "(stopped at the deadline of ${deadline} s)" | tee -a "$out/$file"
}
for p in $parts; do
  say "part $p"
  case $p in
    1|2|3|4) part "$p" ;;
    *) say "no part $p" ;;
  esac
done
say "parts done"

# --- summary.md -------------------------------------------------------------------------------------------
rows() { sed -n "/^## $1\$/,/^## /p" "$out/$2" 2>/dev/null | grep -E '^ *[0-9]+ +[0-9]+ '; }
fmt_bytes() { awk '{b = $1; u = "B"; if (b >= 1048576) {b /= 1048576; u = "MiB"} else if (b >= 1024) {b /= 1024; u = "KiB"}; printf "%g %s", b, u}' <<< "$1"; }
{
  echo "### Sixteen ranks (issue 56): $model_name, $cores cores, $(date -u +%Y-%m-%d)"
  echo
  echo "\`$command_line\` ($(grep -m1 '^  ddl ' "$log" | sed 's/^  //'))."
  echo "One thread a rank unless said; ranks bound: $DDL_BIND. Data: the 6,000-image CIFAR-10 sample, resampled"
  echo "to 224x224 for ResNet-50 and AlexNet; PyTorch's peers train on random images. Figures: the second epoch"
  echo "(ddl) or the steps after one warm-up step (PyTorch; seed_cnn's peer: 20), one run each."
  echo
  if [ -f "$out/part1.txt" ]; then
    echo "Data parallelism, 1 to $max ranks x 1 thread (ResNet-50 at 224: batch $r50_batch a rank, $r50_steps steps;"
    echo "seed_cnn: batch 64, $seed_steps steps). Ceiling: as many independent single-rank ddl_train runs at once."
    echo
    echo "| model | ranks | ddl img/s | PyTorch DDP img/s | ceiling img/s | ddl / DDP | ddl / ceiling | ddl comm wait |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for m in "resnet50 f32:ResNet-50 f32" "resnet50 bf16:ResNet-50 bf16" "seed_cnn f32:seed_cnn"; do
      rows "${m%%:*}" part1.txt | awk -v m="${m#*:}" '{c = $8 == "-" ? "-" : $8 "%"; printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", m, $1, $3, $4, $5, $6, $7, c; m = ""}'
    done
    echo
  fi
  if [ -f "$out/part2.txt" ]; then
    echo "All-reduce bus bandwidth, $max ranks, GB/s (2 (N-1)/N x bytes / the slowest rank's median time;"
    echo "\`mpirun -np $max build/bench/allreduce_bandwidth 256\`; the program starts at 4 KiB):"
    echo
    echo "| bytes | ring | hier | MPI_Allreduce | best of ours / MPI |"
    echo "| ---: | ---: | ---: | ---: | ---: |"
    grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$out/part2.txt" | while read -r bytes ring hier mpi; do
      echo "| $(fmt_bytes "$bytes") | $ring | $hier | $mpi | $(awk -v a="$ring" -v b="$hier" -v m="$mpi" 'BEGIN {x = a > b ? a : b; if (m > 0) printf "%.2fx", x / m; else printf "-"}') |"
    done
    echo
    echo "As training uses it: ResNet-50 f32 at 224, $max ranks, batch $r50_batch a rank:"
    echo
    echo "| all-reduce | img/s | comm wait | MB all-reduced a step |"
    echo "| --- | ---: | ---: | ---: |"
    sed -n '/^all-reduce /,$p' "$out/part2.txt" | tail -n +2 | grep -E '^(mpi|hier|ring),' |
      awk '{l = substr($0, 1, 24); sub(/ +$/, "", l); split(substr($0, 25), f, " "); printf "| %s | %s | %s | %s |\n", l, f[1] == "" ? "-" : f[1], f[2] == "" ? "-" : f[2] "%", f[3] == "" ? "-" : f[3]}'
    echo
  fi
  if [ -f "$out/part3.txt" ]; then
    echo "seeds/002, processes against threads on $cores cores: AlexNet at 224, global batch 32 ($alex_steps steps),"
    echo "R ranks x $cores/R threads; speedup against one rank of one thread, ddl's and PyTorch DDP's each its own:"
    echo
    echo "| model | ranks x threads | ddl img/s | ddl speedup | PyTorch DDP img/s | DDP speedup | ddl / DDP |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    base=$(rows "alexnet 1x1" part3.txt | head -1)
    { echo "$base"; rows "alexnet cores shared out" part3.txt; } | grep . |
      awk -v bd="$(echo "$base" | awk '{print $3}')" -v bp="$(echo "$base" | awk '{print $4}')" '
        function sp(a, b) { return (a > 0 && b > 0) ? sprintf("%.1fx", a / b) : "-" }
        {printf "| AlexNet | %s x %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, sp($3, bd), $4, sp($4, bp), $6}'
    rows "resnet50 f32 one rank, all cores" part3.txt |
      awk '{printf "| ResNet-50 f32 | %s x %s | %s | | %s | | %s |\n", $1, $2, $3, $4, $6}'
    echo
  fi
  if [ -f "$out/part4.txt" ]; then
    echo "seeds/004's Table I, $max ranks: \`bash bench/planner_table.sh $table_model $max $table_steps\` (100 classes,"
    echo "global batch 32, one thread a rank, epoch 2 of 2; planned: the cost model's step for the layout that ran):"
    echo
    echo "| layout | img/s | peak MB | comm % | step s | planned s | off | loss | layout run |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    sed -n '/^layout /,$p' "$out/part4.txt" | tail -n +2 | awk '
      function flush() { if (row != "") print row " " note " |"; row = ""; note = "" }
      /^    layout: / {sub(/^ +layout: /, ""); sub(/: step .*/, ""); note = note $0; next}
      /^    \(re-planned/ {sub(/^ +\(/, ""); sub(/\)$/, ""); note = note (note == "" ? "" : "; ") $0; next}
      /^\(/ {next}
      {
        flush(); label = substr($0, 1, 34); sub(/ +$/, "", label); rest = substr($0, 35)
        if (rest ~ /failed/) { sub(/^ +/, "", rest); gsub(/\|/, "/", rest); row = "| " label " | " rest " | | | | | | |"; next }
        n = split(rest, f, " "); row = "| " label
        for (i = 1; i <= 7; i++) row = row " | " (i <= n ? f[i] : "-")
        row = row " |"
      }
      END {flush()}'
    echo
  fi
  # The issue's goals, where the figures are there.
  echo "Against the goals:"
  for m in "resnet50 f32" "resnet50 bf16" "seed_cnn f32"; do
    rows "$m" part1.txt | tail -1 | awk -v m="$m" -v max="$max" '$1 == max {printf "- %s at %s ranks: ddl %s of the ceiling (goal 90%%), %s PyTorch DDP at the same ranks\n", m, max, $7, $6}'
  done
  best_ddp=$( { rows "resnet50 f32" part1.txt; rows "resnet50 f32 one rank, all cores" part3.txt; } | awk '$4 > b {b = $4} END {print b + 0}')
  ddl16=$(rows "resnet50 f32" part1.txt | awk -v max="$max" '$1 == max {print $3}')
  [ -z "$ddl16" ] || awk -v a="$ddl16" -v b="$best_ddp" -v max="$max" 'BEGIN {if (b > 0) printf "- ResNet-50 f32: ddl at %s x 1 against PyTorch DDP'"'"'s best of %s x 1 and 1 x %s: %.2fx (goal 2x)\n", max, max, max, a / b}'
  grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$out/part2.txt" 2>/dev/null |
    awk '$1 >= 1048576 && $4 > 0 {x = ($2 > $3 ? $2 : $3) / $4; if (lo == "" || x < lo) lo = x; if (x > hi) hi = x}
         END {if (lo != "") printf "- all-reduce, 1 MiB and above: the better of ring and hier at %.2fx to %.2fx MPI_Allreduce (goal 2x)\n", lo, hi}'
} > "$out/summary.md"
say "summary: $out/summary.md"
cat "$out/summary.md"
