#!/usr/bin/env bash
# docker/docker-compose.yml for real: a private Docker daemon that leaves the host's network alone
# (no iptables rules, no default bridge, vfs storage; its data, exec root and socket in a temporary
# folder), a base image of the host's Debian release made with debootstrap and `docker import` (no registry needed), the
# compose file checked and built, three containers started, and docker/run_job.sh training across them
# over ssh and TCP. Everything is taken down and removed at the end. Needs root, docker.io,
# docker-compose and debootstrap, a built tree (DDL_BIN_DIR: the folder of ddl_train and ddl_data, default
# build/launch), and a Debian mirror (DDL_DEBIAN_MIRROR). Exit 77 (skipped) when not root or those are
# missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v dockerd > /dev/null || ! command -v docker-compose > /dev/null ||
   ! command -v debootstrap > /dev/null; then
  echo "docker_cluster: needs root, dockerd, docker-compose and debootstrap: skipped"
  exit 77
fi
dir=$(mktemp -d /tmp/ddl-docker.XXXXXX)
export DOCKER_HOST=unix://$dir/docker.sock
docker=/usr/bin/docker  # Debian's client, matching Debian's daemon
compose=(docker-compose -p "ddltest$$" -f "$root/docker/docker-compose.yml")
cleanup() {
  "${compose[@]}" down -v --rmi local > /dev/null 2>&1 || true
  [ -f "$dir/docker.pid" ] && kill "$(cat "$dir/docker.pid")" 2>/dev/null
  for _ in $(seq 50); do [ -f "$dir/docker.pid" ] && kill -0 "$(cat "$dir/docker.pid")" 2>/dev/null || break; sleep 0.2; done
  grep " $dir" /proc/mounts | awk '{print $2}' | sort -r | xargs -r umount -l 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

dockerd --iptables=false --ip-masq=false --bridge=none --storage-driver=vfs --data-root "$dir/data" \
  --exec-root "$dir/exec" --pidfile "$dir/docker.pid" -H "$DOCKER_HOST" > "$dir/dockerd.log" 2>&1 &
for _ in $(seq 100); do $docker info > /dev/null 2>&1 && break; sleep 0.2; done
$docker info > /dev/null || { cat "$dir/dockerd.log"; exit 1; }

# The image's release is the host's, whose build the containers run.
source "$root/tests/launch/debian_root.sh"
release=$(debian_host_release)
echo "== base image (debootstrap minbase $release)"
base=$(debian_base "$release")
$docker import - "ddl-base:$release" < "$base" > /dev/null

echo "== compose file"
export DDL_BASE_IMAGE=ddl-base:$release
"${compose[@]}" config --services
echo "== build and start"
"${compose[@]}" build --quiet
"${compose[@]}" up -d
echo "== training across the containers"
"${compose[@]}" exec -T -u ddl launcher bash /ddl/docker/run_job.sh --epochs 1 --steps-per-epoch 10 | tee "$dir/job.txt"
grep -q "^ranks 3," "$dir/job.txt"
grep -q "final validation accuracy" "$dir/job.txt"
"${compose[@]}" exec -T launcher test -f /data/checkpoints/last.h5
echo "docker_cluster: done"
