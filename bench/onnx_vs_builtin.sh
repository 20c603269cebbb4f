#!/usr/bin/env bash
# An imported graph against the built-in model it equals (docs/onnx.md): MODEL as PyTorch defines it
# (launch/ddl_torch.py's torch_model: torchvision's resnet50, its VisionTransformer in vit_b16's shape, resnet18
# with the CIFAR stem), exported to ONNX in training mode at the model's image size and built by ddl from the
# graph, against ddl's own MODEL. Each trains step by step on random images (bench/model_step: batch BATCH,
# THREADS threads, STEPS steps after the warm-up, 1,000 classes), alternating, ROUNDS rounds; prints the medians
# of images/s and of peak memory (each run its own process) and the graph's ratios to the built-in model.
#   bash bench/onnx_vs_builtin.sh [THREADS=2] [ROUNDS=3] [BATCH=32] [MODEL=resnet18_cifar] [STEPS=20]
#   DDL_ONNX=FILE uses that export instead of writing build/MODEL.onnx (needs PyTorch: DDL_PYTHON,
#   /usr/bin/python3 without it).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2} rounds=${2:-3} batch=${3:-32} name=${4:-resnet18_cifar} steps=${5:-20}
onnx=${DDL_ONNX:-build/$name.onnx}
step=${DDL_MODEL_STEP:-build/bench/model_step}
if [ ! -f "$onnx" ]; then
  "${DDL_PYTHON:-/usr/bin/python3}" - "$name" "$onnx" <<'EXPORT'
import sys
import torch
sys.path.insert(0, "launch")
import ddl_torch
name, path = sys.argv[1], sys.argv[2]
size = ddl_torch.MODELS[name]
model = ddl_torch.torch_model(name, 1000).train()
torch.onnx.export(model, torch.zeros(2, 3, size, size), path, opset_version=13,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                  input_names=["images"], output_names=["logits"],
                  dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                  **ddl_torch.torchscript_exporter())
EXPORT
fi
lscpu | grep "Model name" | sed 's/  */ /g'
for _ in $(seq "$rounds"); do
  for model in "$name" "$onnx"; do "$step" "$model" "$batch" "$steps" "$threads"; done
done | tee /dev/stderr | awk -v onnx="$onnx" '
  # images/s from the seconds a step: the printed rate has one decimal, too coarse at a few images a second.
  { name = ($2 == onnx) ? "graph" : "builtin"; n[name]++; speed[name, n[name]] = $5 / $8; memory[name, n[name]] = $(NF - 3) }
  function median(values, name, count,   i, j, t, v) {
    for (i = 1; i <= count; i++) v[i] = values[name, i]
    for (i = 1; i <= count; i++) for (j = i + 1; j <= count; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return v[int((count + 1) / 2)]
  }
  END {
    for (m in n) printf "%-8s median %.1f images/s, peak RSS %.0f MB (%d runs)\n", m, median(speed, m, n[m]), median(memory, m, n[m]), n[m]
    printf "graph / built-in: speed %.3f, peak memory %.3f\n", median(speed, "graph", n["graph"]) / median(speed, "builtin", n["builtin"]),
           median(memory, "graph", n["graph"]) / median(memory, "builtin", n["builtin"])
  }'
