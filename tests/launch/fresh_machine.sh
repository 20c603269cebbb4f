#!/usr/bin/env bash
# A machine that has never had ddl's packages, of the Debian release that CI's host is not: a bare Debian
# root file system (debootstrap minbase, cached between runs) with the repository's files in it (what git
# tracks or would track: no build/, no runs/). Inside, `bash launch/setup.sh --install-only` must install
# what builds ddl and its tests, `bash launch/setup.sh --tests --install-only` every tool a skippable test
# looks for, and then the suite runs under AddressSanitizer and UndefinedBehaviorSanitizer
# (tests/sanitizers/run_sanitizers.sh address: the in-process tests with leak checks, a sample of the
# end-to-end tests), alone, as its fault tests are timed. One build and one run check the other release's
# packages and compiler and the sanitizers; the host's suite runs every test in a Release build, and CI
# runs the README's first command on its fresh host (.ci/run). Catches a package that works on a
# developer's machine only because something else installed it. By default, each supported release but
# the host's; several are set up side by side (one's downloads overlap another's build), each in its own
# root. Needs root, debootstrap and unshare; exit 77 (skipped) otherwise.
#   bash tests/launch/fresh_machine.sh [RELEASE...]   (bookworm, trixie)
#   bash tests/launch/fresh_machine.sh --download-only [RELEASE...]
#     only fetches, into the cache the roots share (tests/launch/debian_root.sh): each release's bare root and
#     the packages `setup.sh --tests` installs in it, and the host release's bare root (the Docker test's
#     base). ctest runs this first, beside the host's tests, so that the serial run above spends its time on
#     the CPU rather than on the network.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap > /dev/null || ! command -v unshare > /dev/null; then
  echo "fresh_machine: needs root, debootstrap and unshare: skipped"
  exit 77
fi
source "$root/tests/launch/debian_root.sh"
download_only=""
if [ "${1:-}" = --download-only ]; then download_only=1; shift; fi
for release in "$@"; do
  case "$release" in -*) echo "fresh_machine: unknown option $release (--download-only comes first)" >&2; exit 2 ;; esac
done
releases=("$@")
if [ $# -eq 0 ]; then
  for supported in bookworm trixie; do
    [ "$supported" = "$(debian_host_release)" ] || releases+=("$supported")
  done
fi

# A run that CTest killed at its time limit could not clean up: its roots go now.
for stale in /var/tmp/ddl-fresh-*; do [ -d "$stale" ] && debian_root_remove "$stale"; done
work=$(mktemp -d /var/tmp/ddl-fresh-XXXXXX)
pids=()
cleanup() {
  [ ${#pids[@]} -eq 0 ] || kill -TERM "${pids[@]}" 2> /dev/null || true
  wait
  debian_root_remove "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

if [ -n "$download_only" ]; then
  for release in "${releases[@]}"; do
    debian_root_make "$release" "$work/$release"
    cp "$root/launch/setup.sh" "$work/$release/root/setup.sh"
    debian_root_run "$work/$release" bash /root/setup.sh --tests --download-only
  done
  # The Docker test's base, made here only to save it the time: where this fails, that test makes it.
  debian_base "$(debian_host_release)" > /dev/null || echo "fresh_machine: Debian $(debian_host_release)'s base not made here"
  echo "fresh_machine: downloaded (${releases[*]}, and Debian $(debian_host_release)'s base)"
  exit 0
fi

set_up() {  # RELEASE: its root in $work/RELEASE, its output in $work/RELEASE.txt
  local release=$1 dir=$work/$1 start
  start=$(date +%s)
  step() { echo "== $release, $(($(date +%s) - start)) s: $*"; }
  step "bare Debian $release (debootstrap --variant=minbase)"
  debian_root_make "$release" "$dir"
  mkdir -p "$dir/root/ddl"
  if git -C "$root" rev-parse --git-dir > /dev/null 2>&1; then
    git -C "$root" ls-files -z --cached --others --exclude-standard |
      tar -C "$root" --null -T - --ignore-failed-read -c 2> /dev/null | tar -C "$dir/root/ddl" -x
  else
    tar -C "$root" --exclude=./build --exclude=./runs --exclude=./.git -c . | tar -C "$dir/root/ddl" -x
  fi

  # The build packages alone must build ddl and its tests: a package that only a test package pulls in
  # would be missed otherwise. The build is the sanitizers' (the suite runs in it); a Release build here
  # would be unused.
  step "bash launch/setup.sh --install-only, then the ASan and UBSan build"
  debian_root_run "$dir" bash -c 'cd /root/ddl && bash launch/setup.sh --install-only &&
    bash tests/sanitizers/run_sanitizers.sh address --build-only'
  step "bash launch/setup.sh --tests --install-only"
  debian_root_run "$dir" bash -c 'cd /root/ddl && bash launch/setup.sh --tests --install-only'
  debian_root_run "$dir" bash -c '
    missing=""
    for tool in pgrep ip unshare flock slurmctld slurmd sbatch munged dockerd docker docker-compose debootstrap git clang++ llvm-symbolizer; do
      command -v "$tool" > /dev/null || missing="$missing $tool"
    done
    [ -z "$missing" ] || { echo "fresh_machine: missing after setup.sh --tests:$missing"; exit 1; }'
  step "set up"
}

for release in "${releases[@]}"; do
  (set_up "$release") > "$work/$release.txt" 2>&1 &
  pids+=($!)
done
code=0
for i in "${!releases[@]}"; do
  wait "${pids[i]}" || { code=1; echo "fresh_machine: Debian ${releases[i]}: FAILED"; }
  cat "$work/${releases[i]}.txt"
done
pids=()
[ "$code" -eq 0 ] || exit "$code"

for release in "${releases[@]}"; do
  echo "== $release: the test suite inside under ASan and UBSan (tests/sanitizers/run_sanitizers.sh address)"
  # Its exit 77 (no sanitizer runtime that runs) fails here: setup.sh --tests installs one.
  debian_root_run "$work/$release" bash -c 'cd /root/ddl && bash tests/sanitizers/run_sanitizers.sh address' \
    > "$work/$release.suite.txt" 2>&1 ||
    { cat "$work/$release.suite.txt"; echo "fresh_machine: Debian $release: the suite FAILED"; exit 1; }
  cat "$work/$release.suite.txt"
done
echo "fresh_machine: done (${releases[*]})"
