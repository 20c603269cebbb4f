#!/usr/bin/env bash
# One training step of each of the seeds' large models at 224x224, batch 32, timed in ddl
# (build/bench/model_step) and in PyTorch with torchvision's definition of the same model
# (bench/torch_model_step.py), same thread count, one after the other in one run; prints seconds per
# step, images/s, peak memory and the ratios. Needs python3-torch and python3-torchvision. In bf16, ddl's
# --precision bf16 against PyTorch's autocast to bf16 on the CPU.
#   bash bench/models_vs_pytorch.sh [threads=2] [steps=3] [models="alexnet vgg16 resnet50 vit_b16"]
#                                   [precisions="f32"; "f32 bf16" for both]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
steps=${2:-3}
models=${3:-"alexnet vgg16 resnet50 vit_b16"}
precisions=${4:-f32}
if [[ " $precisions " == *" bf16 "* ]] && ! grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  echo "models_vs_pytorch: this CPU has neither AVX512-BF16 nor AMX: give precisions f32" >&2
  exit 2
fi
python=${DDL_PYTHON:-/usr/bin/python3}
[ -x build/bench/model_step ] || { bash launch/setup.sh && cmake --build build --target model_step; }
declare -A torch_name=([alexnet]=alexnet [vgg16]=vgg16 [resnet50]=resnet50 [resnet18]=resnet18 [vit_b16]=vit_b_16)

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $threads; batch 32; $steps steps" \
  "after the warm-up (ddl: four steps, the buffer pool learning from two; PyTorch: one)"
printf "| model | precision | ddl img/s | PyTorch img/s | ddl / PyTorch | ddl peak MB | PyTorch peak MB |\n| --- | --- | --- | --- | --- | --- | --- |\n" > /tmp/ddl_models_table.$$
rate() { echo "$1" | sed -n 's/.* \([0-9.]*\) images\/s.*/\1/p'; }
mem() { echo "$1" | sed -n 's/.*peak RSS \([0-9]*\) MB.*/\1/p'; }
for m in $models; do
  for p in $precisions; do
    flag=""
    [ "$p" = bf16 ] && flag=--bf16
    d=$(build/bench/model_step "$m" 32 "$steps" "$threads" $flag)
    echo "$d"
    t=$("$python" bench/torch_model_step.py "${torch_name[$m]}" 32 "$steps" "$threads" $flag)
    echo "$t"
    printf "| %s | %s | %s | %s | %.2f | %s | %s |\n" "$m" "$p" "$(rate "$d")" "$(rate "$t")" \
      "$(awk -v a="$(rate "$d")" -v b="$(rate "$t")" 'BEGIN { print a / b }')" "$(mem "$d")" "$(mem "$t")" \
      >> /tmp/ddl_models_table.$$
  done
done
cat /tmp/ddl_models_table.$$
rm -f /tmp/ddl_models_table.$$
