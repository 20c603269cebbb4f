#!/usr/bin/env bash
# Installs what ddl needs from Debian 12's packages (only what is missing) and builds it in build/.
# Usage: bash launch/setup.sh [more packages]   (as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libdnnl-dev libopenmpi-dev openmpi-bin libhdf5-dev
          libboost-program-options-dev libgtest-dev libjpeg62-turbo-dev libpng-dev "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/launch/ddl_train and build/launch/ddl_data"
