#!/usr/bin/env bash
# The documented training runs of issue 4: 200 steps of batch 32 on the CIFAR-10 JPEGs (runs/bench/cifar.h5,
# made by bench/seed_cnn_vs_pytorch.sh from ../shared), training loss printed every 50 steps.
#   bash bench/train_models.sh
set -uo pipefail
cd "$(dirname "$0")/.."
run() { name=$1; shift; echo "== $name $*"; build/launch/ddl_train --train runs/bench/cifar.h5 --epochs 4 --steps-per-epoch 50 --batch-size 32 --threads 2 --progress never --random-flip "$@" 2>&1 | grep -E "^epoch|total parameters|resampled|error"; }
run alexnet_cifar --model alexnet_cifar
run vgg16_cifar --model vgg16_cifar --lr 0.0001
run resnet18_cifar --model resnet18_cifar
run resnet50_cifar --model resnet50_cifar
run vit_tiny --model vit_tiny
run alexnet --model alexnet --lr 0.0001 --normalize imagenet --random-resized-crop
