#!/usr/bin/env bash
# The README's first command on a machine that has never had ddl's packages: a bare Debian root file system
# (debootstrap minbase, cached between runs), the repository's files in it (what git tracks or would track:
# no build/, no runs/), then `bash launch/run_sample.sh` inside, which must install, build, train and print
# a final validation accuracy that shows learning. Then `bash launch/setup.sh --tests` must install what the
# test suite runs, and every tool a skippable test looks for must be there; on a release other than the
# host's, the suite then runs inside (all but the tests that make roots or a Docker daemon themselves). Catches a package that works
# on a developer's machine only because something else installed it. Several releases run side by side
# (one's downloads overlap another's build), each in its own root; the output comes per release. Needs
# root, debootstrap and unshare; exit 77 (skipped) otherwise.
#   bash tests/launch/fresh_machine.sh [RELEASE...]   (bookworm, the default, trixie)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
releases=("${@:-bookworm}")
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap > /dev/null || ! command -v unshare > /dev/null; then
  echo "fresh_machine: needs root, debootstrap and unshare: skipped"
  exit 77
fi
source "$root/tests/launch/debian_root.sh"

fresh_machine() {
  local release=$1 work start accuracy
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
  # The suite runs on the host's own release anyway; on another release it runs here, but for the tests
  # that would make roots and daemons inside this one.
  if [ "$release" != "$(. /etc/os-release && echo "$VERSION_CODENAME")" ]; then
    step "the test suite inside Debian $release"
    debian_root_run "$work/root" bash -c 'cd /root/ddl/build && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_smsc=^cma \
      ctest --output-on-failure -j"$(nproc)" -E "fresh_machine|docker_compose_cluster"' 2>&1 | tail -25
  fi
  step "fresh_machine: Debian $release: final validation accuracy $accuracy"
}

if [ ${#releases[@]} -eq 1 ]; then
  (fresh_machine "${releases[0]}")
  exit
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for release in "${releases[@]}"; do
  (fresh_machine "$release") > "$logs/$release.txt" 2>&1 &
  pids+=($!)
done
code=0
for i in "${!releases[@]}"; do
  wait "${pids[i]}" || { code=1; echo "fresh_machine: Debian ${releases[i]} FAILED"; }
  cat "$logs/${releases[i]}.txt"
done
exit "$code"
