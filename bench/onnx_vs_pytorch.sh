#!/usr/bin/env bash
# Imported graphs against PyTorch: each torchvision model (or bench/lab_networks.py's lab_unet: GroupNorms and
# upsampling), exported to ONNX at SIZE x SIZE in training
# mode (dropout and stochastic depth off in both), trained step by step by ddl from the graph (build/bench/model_step FILE.onnx)
# and by PyTorch eager from the same module definition (bench/torch_model_step.py --size), batch 32, the
# same threads, one after the other in one run; prints images/s, peak memory and the ratios.
#   bash bench/onnx_vs_pytorch.sh [threads=2] [steps=3] [models="mobilenet_v2 densenet121"] [size=64]
# An export is kept as build/MODEL_SIZE.onnx and used again: delete it to export afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2} steps=${2:-3} models=${3:-"mobilenet_v2 densenet121"} size=${4:-64}
python=${DDL_PYTHON:-/usr/bin/python3}
[ -x build/bench/model_step ] || { bash launch/setup.sh && cmake --build build --target model_step; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $threads; batch 32; ${size}x$size;" \
  "$steps steps after the warm-up"
rate() { echo "$1" | sed -n 's/.* \([0-9.]*\) images\/s.*/\1/p'; }
mem() { echo "$1" | sed -n 's/.*peak RSS \([0-9]*\) MB.*/\1/p'; }
table="| model | ddl img/s | PyTorch img/s | ddl / PyTorch | ddl peak MB | PyTorch peak MB |\n| --- | --- | --- | --- | --- | --- |\n"
for m in $models; do
  onnx=build/${m}_${size}.onnx
  [ -f "$onnx" ] || "$python" - "$m" "$size" "$onnx" <<'EXPORT'
import sys
import torch
import torchvision
sys.path[:0] = ["launch", "bench"]
import ddl_torch
import lab_networks
name, size, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kwargs = {"image_size": size} if name.startswith("vit_") else {}  # position embeddings: one per patch
model = (lab_networks.lab_network(name, 1000) if name.startswith("lab_") else
         getattr(torchvision.models, name)(num_classes=1000, **kwargs)).train()
for module in model.modules():
    # A mask PyTorch draws in the graph: the export would keep it fixed (dropout), or PyTorch 1.13 cannot
    # export it in training mode (stochastic depth's Bernoulli). At 0 both are the identity.
    if isinstance(module, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
        module.p = 0.0
torch.onnx.export(model, torch.zeros(2, 3, size, size), path, opset_version=13,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                  input_names=["images"], output_names=["logits"],
                  dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                  **ddl_torch.torchscript_exporter())
EXPORT
  d=$(build/bench/model_step "$onnx" 32 "$steps" "$threads")
  echo "$d"
  t=$("$python" bench/torch_model_step.py "$m" 32 "$steps" "$threads" --size="$size" --no-dropout)
  echo "$t"
  table+=$(printf "| %s | %s | %s | %.2f | %s | %s |" "$m" "$(rate "$d")" "$(rate "$t")" \
    "$(awk -v a="$(rate "$d")" -v b="$(rate "$t")" 'BEGIN { print a / b }')" "$(mem "$d")" "$(mem "$t")")"\n"
done
printf "%b" "$table"
