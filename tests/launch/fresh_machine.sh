#!/usr/bin/env bash
# The README's first command on a machine that has never had ddl's packages: a bare Debian root file system
# (debootstrap minbase, cached between runs), the repository's files in it (what git tracks or would track:
# no build/, no runs/), then `bash launch/run_sample.sh` inside, which must install, build, train and print
# a final validation accuracy that shows learning. Then `bash launch/setup.sh --tests` must install what the
# test suite runs, and every tool a skippable test looks for must be there. Catches a package that works
# on a developer's machine only because something else installed it. Needs root, debootstrap and unshare;
# exit 77 (skipped) otherwise.
#   bash tests/launch/fresh_machine.sh [RELEASE]   (bookworm, the default, or trixie)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
release=${1:-bookworm}
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap > /dev/null || ! command -v unshare > /dev/null; then
  echo "fresh_machine: needs root, debootstrap and unshare: skipped"
  exit 77
fi
source "$root/tests/launch/debian_root.sh"
work=$(mktemp -d /var/tmp/ddl-fresh-"$release".XXXXXX)
trap 'debian_root_remove "$work"' EXIT
start=$(date +%s)
step() { echo "== $(($(date +%s) - start)) s: $*"; }

step "bare Debian $release (debootstrap --variant=minbase)"
debian_root_make "$release" "$work/root"
mkdir -p "$work/root/root/ddl"
if git -C "$root" rev-parse --git-dir > /dev/null 2>&1; then
  git -C "$root" ls-files -z --cached --others --exclude-standard |
    tar -C "$root" --null -T - --ignore-failed-read -c 2>/dev/null | tar -C "$work/root/root/ddl" -x
else
  tar -C "$root" --exclude=./build --exclude=./runs --exclude=./.git -c . | tar -C "$work/root/root/ddl" -x
fi

step "bash launch/run_sample.sh"
debian_root_run "$work/root" bash -c 'cd /root/ddl && bash launch/run_sample.sh' 2>&1 | tee "$work/sample.txt"
accuracy=$(sed -n 's/^final validation accuracy \([0-9.]*\).*/\1/p' "$work/sample.txt")
[ -n "$accuracy" ] || { echo "fresh_machine: no final validation accuracy line"; exit 1; }
# Ten classes: chance is 0.1; five epochs on the sample reach about 0.5.
awk -v a="$accuracy" 'BEGIN {exit !(a >= 0.35)}' ||
  { echo "fresh_machine: final validation accuracy $accuracy is below 0.35"; exit 1; }

step "bash launch/setup.sh --tests"
debian_root_run "$work/root" bash -c 'cd /root/ddl && bash launch/setup.sh --tests' 2>&1 | tail -3
debian_root_run "$work/root" bash -c '
  missing=""
  for tool in pgrep ip unshare flock slurmctld slurmd sbatch munged dockerd docker docker-compose debootstrap git; do
    command -v "$tool" > /dev/null || missing="$missing $tool"
  done
  [ -z "$missing" ] || { echo "fresh_machine: missing after setup.sh --tests:$missing"; exit 1; }'
step "fresh_machine: Debian $release: final validation accuracy $accuracy"
