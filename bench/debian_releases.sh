#!/usr/bin/env bash
# Debian 13 (oneDNN 3.7, GCC 14, PyTorch 2.6) against Debian 12 (oneDNN 2.6, GCC 12, PyTorch 1.13) on this
# machine, side by side in one run: the Debian 12 side runs here, the Debian 13 side in a Debian 13 root
# file system (made once in runs/bench/trixie-root with tests/launch/debian_root.sh, ddl built there in
# runs/bench/build-trixie/), alternating 12, 13, 12, 13... For each: seed_cnn's epoch (ddl_train, 40,000
# CIFAR-10 images, batch 64) and the PyTorch peer's, the oneDNN-only ceiling, seed_cnn on 2 data-parallel
# ranks against PyTorch DDP, and one training step of the large models (bench/model_step against
# torchvision's, batch 32 at 224x224), and bench/strategies.sh's data-parallel row (2 ranks x 1 thread,
# global batch 32 at 224x224) against PyTorch DDP with torchvision's model. Root only; needs ../shared and,
# here, python3-torch python3-torchvision python3-pil python3-numpy (installed in the Debian 13 root).
#   bash bench/debian_releases.sh [threads=2] [rounds=2] [models="alexnet resnet50 vit_b16"] [steps=2]
#                                 [parts="seed models ddp"] [ddp models="resnet50 vgg16"]
# (rounds: of the seed_cnn figures; the large models and the data-parallel rows run once on each side)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "debian_releases.sh: needs root (a chroot)" >&2; exit 2; }
threads=${1:-2} rounds=${2:-2} models=${3:-"alexnet resnet50 vit_b16"} steps=${4:-2}
parts=${5:-"seed models ddp"} ddp_models=${6:-"resnet50 vgg16"}
shared=${DDL_SHARED:-../shared}
work=runs/bench
trixie=$work/trixie-root
source tests/launch/debian_root.sh
mkdir -p "$work"
[ -x build/launch/ddl_train ] || bash launch/setup.sh
cmake --build build -j"$(nproc)" --target ddl_train ddl_data model_step onednn_ceiling > /dev/null
[ -d "$work/train" ] || tar xzf "$shared/datasets/cifar10/train.tar.gz" -C "$work"
[ -f "$work/cifar.h5" ] ||
  build/launch/ddl_data import --from "$work/train" --output "$work/cifar.h5" --val-fraction 0.2 --seed 1
[ -f runs/sample/train.h5 ] || bash launch/run_sample.sh --epochs 1 --steps-per-epoch 1 > /dev/null
[ -f "$work/cifar.npz" ] || /usr/bin/python3 "$shared/peers/cifar_npz.py" "$work/train" "$work/cifar.npz" > /dev/null
# The Debian 13 root sees only the repository.
cp "$shared/peers/pytorch_seed_cnn.py" "$shared/peers/pytorch_ddp_bench.py" "$work/"
if [ ! -f "$trixie/.ready" ]; then
  rm -rf "$trixie"
  debian_root_make trixie "$trixie"
  DEBIAN_ROOT_BIND="$PWD:/ddl" debian_root_run "$trixie" bash -c 'cd /ddl && bash launch/setup.sh --install-only \
    python3-torch python3-torchvision python3-pil python3-numpy > /dev/null'
  touch "$trixie/.ready"
fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export USE_LIBUV=0  # Debian's PyTorch 2.6 has no libuv, which its DDP rendezvous asks for by default
in13() { DEBIAN_ROOT_BIND="$PWD:/ddl" debian_root_run "$trixie" bash -c "cd /ddl && $1"; }
# Its own build folder keeps the Debian 13 build apart from build/ (the same folder, seen from both systems).
in13 "cmake -S . -B $work/build-trixie -DCMAKE_BUILD_TYPE=Release > /dev/null &&
      cmake --build $work/build-trixie -j$(nproc) --target ddl_train model_step onednn_ceiling > /dev/null"

# One side's figures, as "key ddl_img/s peer_img/s" triples: seed_cnn's epoch against the PyTorch peer,
# the oneDNN-only ceiling ("-" for its peer), or one large model's step against torchvision's. A PyTorch
# step that has not finished after 240 s counts as "-" (PyTorch 1.13's ViT-B/16 never did here).
seed_figures() {  # BUILD_DIR
  local b=$1
  echo "seed $($b/launch/ddl_train --train $work/cifar.h5 --epochs 1 --threads $threads --progress never --seed 1 |
               sed -n 's/.* \([0-9]*\) img\/s.*/\1/p')" \
       "$(/usr/bin/python3 $work/pytorch_seed_cnn.py --train $work/cifar.npz --epochs 1 --threads $threads |
          sed -n 's/.*imgs\/s \([0-9]*\).*/\1/p' | tail -1)" \
       "ceiling $(OMP_NUM_THREADS=$threads $b/bench/onednn_ceiling 64 200 |
                  sed -n 's/.*: \([0-9]*\) images\/s.*/\1/p') -" \
       "ddp $(mpirun --oversubscribe -np 2 --bind-to core $b/launch/ddl_train --train $work/cifar.h5 --epochs 1 \
                --steps-per-epoch 200 --threads 1 --progress never --seed 1 2>&1 |
              sed -n 's/.* \([0-9]*\) img\/s.*/\1/p')" \
       "$(/usr/bin/python3 $work/pytorch_ddp_bench.py --ranks 2 --threads 1 --batch 64 --steps 200 |
          sed -n 's/.*imgs\/s=\([0-9]*\).*/\1/p')"
}
model_figures() {  # BUILD_DIR
  local b=$1 m t line=""
  declare -A tv=([alexnet]=alexnet [vgg16]=vgg16 [resnet50]=resnet50 [vit_b16]=vit_b_16)
  for m in $models; do
    t=$(timeout 240 /usr/bin/python3 bench/torch_model_step.py ${tv[$m]} 32 $steps $threads |
        sed -n 's/.* \([0-9.]*\) images\/s.*/\1/p' || true)
    line+="$m $($b/bench/model_step $m 32 $steps $threads | sed -n 's/.* \([0-9.]*\) images\/s.*/\1/p') ${t:--} "
  done
  echo "$line"
}
ddp_model_figures() {  # BUILD_DIR: as bench/strategies.sh's data-parallel and PyTorch DDP rows
  local b=$1 m seconds t line=""
  declare -A tv=([alexnet]=alexnet [vgg16]=vgg16 [resnet50]=resnet50 [vit_b16]=vit_b_16)
  for m in $ddp_models; do
    seconds=$(mpirun --oversubscribe -np 2 $b/launch/ddl_train --model $m --train runs/sample/train.h5 \
                --epochs 2 --steps-per-epoch $steps --optimizer sgd --lr 0.01 --progress never --threads 1 \
                --bucket-mb 0 --batch-size 16 | grep '^epoch 2/2' | sed -n 's/.*time \([0-9.]*\) s .*/\1/p')
    t=$(timeout 600 /usr/bin/python3 bench/torch_model_ddp.py ${tv[$m]} 2 1 16 $steps |
        sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p' || true)
    line+="${m}_ddp $(awk -v s="$seconds" -v n=$((32 * steps)) 'BEGIN {print n / s}') ${t:--} "
  done
  echo "$line"
}
functions="threads=$threads work=$work models='$models' ddp_models='$ddp_models' steps=$steps;
           $(declare -f seed_figures model_figures ddp_model_figures)"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $threads; $rounds rounds"
: > "$work/releases.txt"
both() {  # FIGURES_FUNCTION
  echo "12 $($1 build)" | tee -a "$work/releases.txt"
  echo "13 $(in13 "$functions; $1 $work/build-trixie")" | tee -a "$work/releases.txt"
}
if [[ " $parts " == *" seed "* ]]; then for _ in $(seq "$rounds"); do both seed_figures; done; fi
if [[ " $parts " == *" models "* ]]; then both model_figures; fi
if [[ " $parts " == *" ddp "* ]]; then both ddp_model_figures; fi
# Medians per release and figure, then the table.
python3 - "$work/releases.txt" <<'PY'
import statistics, sys
figures = {}  # (release, key) -> [(ddl, peer)]
for line in open(sys.argv[1]):
    f = line.split()
    for i in range(1, len(f) - 2, 3):
        peer = None if f[i + 2] == "-" else float(f[i + 2])
        figures.setdefault((f[0], f[i]), []).append((float(f[i + 1]), peer))
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
fmt = lambda v: "-" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.2f}")
names = {"seed": "seed_cnn epoch, batch 64", "ceiling": "oneDNN-only seed_cnn step, batch 64",
         "ddp": "seed_cnn, 2 ranks x 1 thread (PyTorch: DDP), 200 steps of 64 a rank",
         "resnet50_ddp": "ResNet-50, 2 ranks x 1 thread (PyTorch: DDP), 16 a rank at 224",
         "vgg16_ddp": "VGG16, 2 ranks x 1 thread (PyTorch: DDP), 16 a rank at 224"}
print("| images/s (medians) | ddl, oneDNN 2.6 | ddl, oneDNN 3.7 | 3.7 / 2.6 | PyTorch 1.13 | PyTorch 2.6 |"
      " ddl on 3.7 / faster PyTorch |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for key in dict.fromkeys(k for _, k in figures):
    d12, d13 = (median(d for d, _ in figures[(r, key)]) for r in ("12", "13"))
    p12, p13 = (median(p for _, p in figures[(r, key)]) for r in ("12", "13"))
    best = max([p for p in (p12, p13) if p is not None], default=None)
    print(f"| {names.get(key, key + ' step, batch 32')} | {fmt(d12)} | {fmt(d13)} | {d13 / d12:.2f} |"
          f" {fmt(p12)} | {fmt(p13)} |"
          f" {'-' if best is None else f'{d13 / best:.2f}'} |")
PY
