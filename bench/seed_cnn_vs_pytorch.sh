#!/usr/bin/env bash
# Trains seed_cnn on the same 40,000 CIFAR-10 images with ddl_train and with the PyTorch peer
# (../shared/peers/pytorch_seed_cnn.py), same thread count, one after the other in one run
# (ddl, PyTorch, ddl, PyTorch, ddl), one epoch each; prints images/s, peak memory and their ratio,
# and the oneDNN-only ceiling, run for as many steps right before each ddl run. Needs ../shared and
# python3-torch python3-pil python3-numpy.
# In bf16: ddl_train --precision bf16, the peer run under torch.autocast("cpu", dtype=torch.bfloat16)
# (its whole script, unchanged), and the ceiling's bf16 chain.
#   bash bench/seed_cnn_vs_pytorch.sh [threads=2] [rounds=2] [precision=f32|bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
rounds=${2:-2}
precision=${3:-f32}
shared=${DDL_SHARED:-../shared}
work=runs/bench
mkdir -p "$work"
[ -x build/launch/ddl_train ] || bash launch/setup.sh
cmake --build build --target onednn_ceiling > /dev/null
if [ ! -d "$work/train" ]; then tar xzf "$shared/datasets/cifar10/train.tar.gz" -C "$work"; fi
if [ ! -f "$work/cifar.h5" ]; then
  build/launch/ddl_data import --from "$work/train" --output "$work/cifar.h5" --val-fraction 0.2 --seed 1
fi
if [ ! -f "$work/cifar.npz" ]; then /usr/bin/python3 "$shared/peers/cifar_npz.py" "$work/train" "$work/cifar.npz" >/dev/null; fi

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $threads; batch 64; 1 epoch of 40,000 images; $precision"
ddl_rates=()
torch_rates=()
ddl_mem=""
torch_mem=""
chain_rates=()
chain_shares=()
# The chain right before each ddl_train run, over as many steps as the epoch (625): this machine's speed
# drifts by up to 20% over seconds, so each ddl epoch is set against the chain measured next to it.
run_chain() {
  chain_rates+=("$(OMP_NUM_THREADS=$threads build/bench/onednn_ceiling 64 625 "$precision" |
    sed -n 's/.*: \([0-9]*\) images\/s.*/\1/p')")
}
run_ddl() {
  local out
  run_chain
  out=$(build/launch/ddl_train --train "$work/cifar.h5" --epochs 1 --threads "$threads" --progress never --seed 1 \
    --precision "$precision")
  ddl_rates+=("$(echo "$out" | sed -n 's/.* \([0-9]*\) img\/s.*/\1/p')")
  ddl_mem=$(echo "$out" | sed -n 's/.*peak RSS \([0-9]*\) MB.*/\1/p')
  chain_shares+=("$(awk -v a="${ddl_rates[-1]}" -v b="${chain_rates[-1]}" 'BEGIN {printf "%.1f", 100 * a / b}')")
  echo "  ddl_train: ${ddl_rates[-1]} images/s, peak RSS ${ddl_mem} MB; the chain just before: ${chain_rates[-1]} images/s (${chain_shares[-1]}%)"
}
run_torch() {
  local out
  out=$(/usr/bin/python3 - "$shared/peers/pytorch_seed_cnn.py" "$work/cifar.npz" "$threads" "$precision" <<'PY'
import resource, subprocess, sys
script, npz, threads, precision = sys.argv[1:5]
args = ["--train", npz, "--epochs", "1", "--threads", threads]
autocast = ("import runpy, sys, torch\nsys.argv = sys.argv[1:]\n"
            "with torch.autocast('cpu', dtype=torch.bfloat16):\n    runpy.run_path(sys.argv[0], run_name='__main__')\n")
command = [sys.executable, "-c", autocast, script] if precision == "bf16" else [sys.executable, script]
r = subprocess.run(command + args, capture_output=True, text=True, check=True)
print(r.stdout)
print("peak_rss_mb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
)
  torch_rates+=("$(echo "$out" | sed -n 's/.*imgs\/s \([0-9]*\).*/\1/p')")
  torch_mem=$(echo "$out" | sed -n 's/peak_rss_mb \([0-9]*\)/\1/p')
  echo "  PyTorch:   ${torch_rates[-1]} images/s, peak RSS ${torch_mem} MB"
}
run_ddl
for _ in $(seq "$rounds"); do run_torch; run_ddl; done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
d=$(median "${ddl_rates[@]}")
t=$(median "${torch_rates[@]}")
echo "median images/s: ddl_train $d, PyTorch $t, ratio $(awk -v a="$d" -v b="$t" 'BEGIN {printf "%.2f", a / b}')x"
echo "oneDNN-only ceiling (bench/onednn_ceiling, 625 steps before each ddl run): median $(median "${chain_rates[@]}") images/s; ddl_train's epoch reaches a median $(median "${chain_shares[@]}")% of the chain beside it (each: ${chain_shares[*]})"
echo "peak RSS: ddl_train ${ddl_mem} MB, PyTorch ${torch_mem} MB"
