#!/usr/bin/env bash
# Installs what ddl needs from Debian's packages (only what is missing) and builds ddl_train and ddl_data
# in build/.
# Usage: bash launch/setup.sh [--tests] [more packages]   (as root, or with sudo available)
#   --tests  also installs what the test suite runs (launch/run_tests.sh): Slurm, Docker, debootstrap...,
#            and builds everything (tests and benchmarks too)
#   --install-only  installs, builds nothing
#   --download-only  fetches the packages into apt's cache (/var/cache/apt/archives), installs and builds
#            nothing: for a machine that goes offline later, and the fresh-machine test's early download
# Every package is named here even when another one would pull it in: installs use
# --no-install-recommends, so only a package's hard dependencies come along (libdnnl-dev merely recommends
# the OpenCL headers that oneDNN's CMake package requires).
set -euo pipefail
cd "$(dirname "$0")/.."

build_packages=(
  build-essential cmake pkg-config
  libdnnl-dev ocl-icd-opencl-dev          # oneDNN; its CMake package looks for OpenCL
  libopenmpi-dev openmpi-bin              # MPI (mpirun, mpicxx's libraries)
  libhdf5-dev libboost-program-options-dev libgtest-dev
  libjpeg62-turbo-dev libpng-dev          # image import
  libonnx-dev libprotobuf-dev             # ONNX models (--model FILE.onnx); libonnx-dev leaves out protobuf's headers
)
test_packages=(
  procps                                  # pgrep: tests signal single ranks
  iproute2 util-linux                     # network-namespace hosts (ip netns, unshare), chroot mounts, flock
  slurmctld slurmd slurm-client munge     # a real Slurm cluster
  docker.io docker-compose                # a docker-compose cluster on a private daemon
  debootstrap git                         # bare Debian root file systems (the fresh-machine test)
  clang libclang-rt-dev libomp-dev llvm   # the fuzz build: clang (14 on Debian 12, 19 on 13), its libFuzzer
                                          # and sanitizer runtimes, its OpenMP, llvm-symbolizer (named stacks)
  python3-torch python3-torchvision       # launch/export_torch.py and import_torch.py, checked against
  python3-h5py python3-onnx python3-pil   # torchvision (tests/launch/torch_interop_test.py)
)
# Debian 13 moved docker.io's client into docker-cli, which docker.io only recommends.
[ "$(. /etc/os-release && echo "$VERSION_CODENAME")" = bookworm ] || test_packages+=(docker-cli)
packages=("${build_packages[@]}")
targets=(--target ddl_train ddl_data)
build=1
download_only=() verb=installing
for arg in "$@"; do
  case "$arg" in
    --tests) packages+=("${test_packages[@]}"); targets=() ;;
    --install-only) build="" ;;
    --download-only) build=""; download_only=(--download-only) verb=downloading ;;
    -*) echo "setup.sh: unknown option $arg (--tests, --install-only, --download-only, or package names)" >&2
        exit 2 ;;
    *) packages+=("$arg") ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: $verb ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${download_only[@]}" \
    "${missing[@]}" > /dev/null
fi

[ -n "$build" ] || exit 0
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" "${targets[@]}"
if [ ${#targets[@]} -gt 0 ]; then
  echo "setup: built build/launch/ddl_train and build/launch/ddl_data"
else
  echo "setup: built ddl_train, ddl_data, the tests and the benchmarks in build/"
fi
