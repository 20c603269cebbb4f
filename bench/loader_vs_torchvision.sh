#!/usr/bin/env bash
# Decode + random-resized-crop + flip to 224, ddl's loader against torchvision's pipeline on the same JPEG
# files, 1 and 2 threads, each pair timed in turn, A B A B (farm-bench's way where it is installed).
# ImageNet-like folders are made from the repository's sample (bench/make_jpeg_folders.cpp) unless FOLDER
# is given; ddl reads them from an encoded dataset (ddl_data import --store encoded).
#   bash bench/loader_vs_torchvision.sh [IMAGES_PER_CLASS=300] [FOLDER]
set -euo pipefail
cd "$(dirname "$0")/.."
per_class=${1:-300}
work=build/bench/jpeg_folders
folder=${2:-$work/folder_$per_class}
mkdir -p "$work"
if [ -z "${2:-}" ] && [ ! -d "$folder" ]; then
  [ -d "$work/sample" ] || { mkdir -p "$work/sample" && tar xzf data/cifar10_sample.tar.gz -C "$work/sample"; }
  build/bench/make_jpeg_folders "$work/sample/cifar10_sample" "$folder" "$per_class"
fi
dataset=$work/$(basename "$folder").h5
[ -f "$dataset" ] || build/launch/ddl_data import --store encoded --from "$folder" --output "$dataset" | tail -2
lscpu | grep 'Model name'
rate() { "$@" 2>&1 | tail -1 | awk '{print $(NF-1)}'; }
for threads in 1 2; do
  declare -a ours=() theirs=()
  for round in 1 2; do
    ours+=("$(rate build/bench/loader_throughput "$dataset" --image-size 224 --random-resized-crop --random-flip --threads "$threads")")
    theirs+=("$(rate /usr/bin/python3 bench/torchvision_loader.py "$folder" 224 "$threads")")
  done
  awk -v t="$threads" -v a="${ours[*]}" -v b="${theirs[*]}" 'BEGIN {
    split(a, x, " "); split(b, y, " "); o = (x[1] + x[2]) / 2; p = (y[1] + y[2]) / 2;
    printf "%d thread(s): ddl %.1f images/s, torchvision %.1f images/s: %.2fx\n", t, o, p, o / p }'
done
