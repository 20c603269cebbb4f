#!/usr/bin/env bash
# A machine that has never had ddl's packages, of the Debian release that CI's host is not: bare Debian root
# file systems (debootstrap minbase, cached between runs). In one, with the repository's files (what git
# tracks or would track: no build/, no runs/), `bash launch/setup.sh --install-only` must install what builds
# ddl and its tests; in another, `bash launch/setup.sh --tests --install-only` must install every tool a
# skippable test looks for, and the suite, built in the first, runs there under AddressSanitizer and
# UndefinedBehaviorSanitizer (tests/sanitizers/run_sanitizers.sh address: the in-process tests with leak
# checks, a sample of the end-to-end tests), alone, as its fault tests are timed. One build and one run
# check the other release's packages and compiler and the sanitizers; the host's suite runs every test in a
# Release build, and CI runs the README's first command on its fresh host (.ci/run). Catches a package that
# works on a developer's machine only because something else installed it. By default, each supported
# release but the host's; several are built side by side, each in its own roots. Needs root, debootstrap
# and unshare; exit 77 (skipped) otherwise.
#   bash tests/launch/fresh_machine.sh [RELEASE...]   (bookworm, trixie)
#   bash tests/launch/fresh_machine.sh --prepare [RELEASE...]
#     only makes the roots and installs the packages in them (and the host release's bare root, the Docker
#     test's base), for a later run without --prepare to build and test in. ctest runs this first, beside the
#     host's tests: it waits on the network and on dpkg, which use one core, while the build and the suite
#     use every core and run alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap > /dev/null || ! command -v unshare > /dev/null; then
  echo "fresh_machine: needs root, debootstrap and unshare: skipped"
  exit 77
fi
source "$root/tests/launch/debian_root.sh"
prepare_only=""
if [ "${1:-}" = --prepare ]; then prepare_only=1; shift; fi
for release in "$@"; do
  case "$release" in -*) echo "fresh_machine: unknown option $release (--prepare comes first)" >&2; exit 2 ;; esac
done
releases=("$@")
if [ $# -eq 0 ]; then
  for supported in bookworm trixie; do
    [ "$supported" = "$(debian_host_release)" ] || releases+=("$supported")
  done
fi

# Each release's two roots: RELEASE-build, where the build packages alone build ddl, and RELEASE-tests, where
# every package is installed and the suite runs; RELEASE.ready once both are set up.
roots=/var/tmp/ddl-fresh-roots
remove_roots() {
  for dir in "$roots"/*/; do debian_root_remove "$dir"; done
  rm -rf "$roots"
}
pids=()
finish() {
  [ ${#pids[@]} -eq 0 ] || kill -TERM "${pids[@]}" 2> /dev/null || true
  wait
  # Prepared roots stay for the run that uses them; that run, or a failed preparation, removes them.
  [ -n "$prepare_only" ] && [ "$1" -eq 0 ] || remove_roots
}
trap 'finish $?' EXIT
trap 'exit 143' TERM INT

set_up() {  # RELEASE: both roots with their packages
  local release=$1 start
  start=$(date +%s)
  step() { echo "== $release, $(($(date +%s) - start)) s: $*"; }
  step "two bare Debian $release roots (debootstrap --variant=minbase)"
  for kind in build tests; do
    debian_root_remove "$roots/$release-$kind"  # what a killed run left
    debian_root_make "$release" "$roots/$release-$kind"
    cp "$root/launch/setup.sh" "$roots/$release-$kind/root/setup.sh"
  done
  step "bash launch/setup.sh --install-only in one"
  debian_root_run "$roots/$release-build" bash /root/setup.sh --install-only
  step "bash launch/setup.sh --tests --install-only in the other"
  debian_root_run "$roots/$release-tests" bash -c '
    set -e
    bash /root/setup.sh --tests --install-only
    missing=""
    for tool in pgrep ip unshare flock slurmctld slurmd sbatch munged dockerd docker docker-compose debootstrap git clang++ llvm-symbolizer; do
      command -v "$tool" > /dev/null || missing="$missing $tool"
    done
    [ -z "$missing" ] || { echo "fresh_machine: missing after setup.sh --tests:$missing"; exit 1; }'
  touch "$roots/$release.ready"
  step "set up"
}

build() {  # RELEASE: the ASan build in its build root, moved into its tests root
  local release=$1 dir=$roots/$1-build
  echo "== $release: the ASan and UBSan build, with the build packages alone"
  # The repository's files now, not when the roots were prepared.
  rm -rf "$dir/root/ddl"
  mkdir -p "$dir/root/ddl"
  if git -C "$root" rev-parse --git-dir > /dev/null 2>&1; then
    git -C "$root" ls-files -z --cached --others --exclude-standard |
      tar -C "$root" --null -T - --ignore-failed-read -c 2> /dev/null | tar -C "$dir/root/ddl" -x
  else
    tar -C "$root" --exclude=./build --exclude=./runs --exclude=./.git -c . | tar -C "$dir/root/ddl" -x
  fi
  # The build is the sanitizers' (the suite runs in it); a Release build here would be unused.
  debian_root_run "$dir" bash -c 'cd /root/ddl && bash tests/sanitizers/run_sanitizers.sh address --build-only'
  # The same path inside, on the same file system: the build runs unchanged in the other root.
  rm -rf "$roots/$release-tests/root/ddl"
  mv "$dir/root/ddl" "$roots/$release-tests/root/ddl"
}

if [ -n "$prepare_only" ]; then
  # A run that CTest killed at its time limit could not clean up: its roots go now.
  remove_roots
  mkdir -p "$roots"
  for release in "${releases[@]}"; do set_up "$release"; done
  # The Docker test's base; its absence only slows that test down.
  debian_base "$(debian_host_release)" > /dev/null || echo "fresh_machine: Debian $(debian_host_release)'s base not made here"
  echo "fresh_machine: prepared (${releases[*]}, and Debian $(debian_host_release)'s base)"
  exit 0
fi

mkdir -p "$roots"
for release in "${releases[@]}"; do
  ( if [ ! -e "$roots/$release.ready" ]; then set_up "$release"; fi; build "$release" ) > "$roots/$release.txt" 2>&1 &
  pids+=($!)
done
code=0
for i in "${!releases[@]}"; do
  wait "${pids[i]}" || { code=1; echo "fresh_machine: Debian ${releases[i]}: FAILED"; }
  cat "$roots/${releases[i]}.txt"
done
pids=()
[ "$code" -eq 0 ] || exit "$code"

for release in "${releases[@]}"; do
  echo "== $release: the test suite inside under ASan and UBSan (tests/sanitizers/run_sanitizers.sh address)"
  # Its exit 77 (no sanitizer runtime that runs) fails here: setup.sh --tests installs one.
  debian_root_run "$roots/$release-tests" bash -c 'cd /root/ddl && bash tests/sanitizers/run_sanitizers.sh address' \
    > "$roots/$release.suite.txt" 2>&1 ||
    { cat "$roots/$release.suite.txt"; echo "fresh_machine: Debian $release: the suite FAILED"; exit 1; }
  cat "$roots/$release.suite.txt"
done
echo "fresh_machine: done (${releases[*]})"
