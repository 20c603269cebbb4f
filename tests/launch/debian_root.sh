# Sourced, not run: bare Debian root file systems for tests (root only), as a fresh machine has them.
#   debian_base RELEASE          prints the path of a tarball of `debootstrap --variant=minbase RELEASE`,
#                                made once and kept in $DDL_TEST_CACHE (default /var/cache/ddl-tests) for
#                                later runs; concurrent callers wait for the one that makes it
#   debian_root_make RELEASE DIR unpacks that base into DIR and gives it the Debian apt sources the host
#                                uses (the same mirrors, this release's suites)
#   debian_root_run DIR CMD...   runs CMD chrooted in DIR with /proc, /sys (and its cgroups), /dev,
#                                /dev/pts and a fresh /dev/shm mounted (downloaded packages kept in the
#                                cache for later runs);
#                                DEBIAN_ROOT_BIND=HOST_PATH:PATH also shows a host folder at PATH inside
#   debian_root_remove DIR       kills what still runs in DIR (or roots under it) and removes it (call it
#                                on every exit path)
#   debian_host_release          bookworm, trixie...
# Mirrors: DDL_DEBIAN_MIRROR (default: the host's first Debian mirror, else deb.debian.org).

debian_cache=${DDL_TEST_CACHE:-/var/cache/ddl-tests}

# The host's own Debian mirror and security mirror, so that a test downloads from where apt-get here does.
debian_host_mirror() {  # debian | debian-security
  local uri
  uri=$(grep -hoE "https?://[^ ]+/$1/?( |$)" /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
          /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | tr -d ' ')
  echo "${uri:-http://deb.debian.org/$1}"
}

debian_base() {
  local release=$1 tarball="$debian_cache/$1-minbase.tar" tmp
  mkdir -p "$debian_cache"
  (
    flock 9
    if [ ! -s "$tarball" ]; then
      tmp=$(mktemp -d "$debian_cache/$release.XXXXXX")
      # In a mount namespace of its own, so that the /proc and /sys it mounts cannot outlive it.
      if ! unshare --mount --propagation private debootstrap --variant=minbase "$release" "$tmp/root" \
          "${DDL_DEBIAN_MIRROR:-$(debian_host_mirror debian)}" > "$tmp/debootstrap.log" 2>&1; then
        tail -20 "$tmp/debootstrap.log" >&2
        rm -rf "$tmp"
        exit 1
      fi
      tar -C "$tmp/root" -cf "$tarball.part" . && mv "$tarball.part" "$tarball" ||
        { echo "debian_root: cannot write $tarball" >&2; rm -rf "$tmp" "$tarball.part"; exit 1; }
      rm -rf "$tmp"
    fi
  ) 9> "$debian_cache/$release.lock" || return 1
  echo "$tarball"
}

debian_root_make() {
  local release=$1 dir=$2 tarball mirror security
  tarball=$(debian_base "$release") || return 1
  mkdir -p "$dir"
  tar -C "$dir" -xf "$tarball"
  mirror=${DDL_DEBIAN_MIRROR:-$(debian_host_mirror debian)}
  security=$(debian_host_mirror debian-security)
  cat > "$dir/etc/apt/sources.list" <<SOURCES
deb $mirror $release main
deb $mirror $release-updates main
deb $security $release-security main
SOURCES
  cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
  # Packages installed there must not start their services (docker.io, munge, slurmd would), as in any
  # chroot: the tests start what they need themselves.
  printf '#!/bin/sh\nexit 101\n' > "$dir/usr/sbin/policy-rc.d"
  chmod +x "$dir/usr/sbin/policy-rc.d"
  mkdir -p "$debian_cache/apt-$release"
  echo "$release" > "$dir/.ddl-release"
}

# The mounts live in a mount namespace of the command's own, so they go away with it on every exit path.
debian_root_run() {
  local dir=$1
  shift
  unshare --mount --propagation private sh -ec '
    dir=$1 cache=$2
    shift 2
    mount --bind "$dir" "$dir"  # a mount point, as / is on a machine (`ip netns exec` needs it)
    mount --bind "$cache" "$dir/var/cache/apt/archives"
    mount -t proc proc "$dir/proc"
    mount --rbind /sys "$dir/sys"  # with the cgroup file system under it, which slurmd needs
    mount --bind /dev "$dir/dev"
    mount -t devpts devpts "$dir/dev/pts" -o newinstance,ptmxmode=0666
    mount -t tmpfs shm "$dir/dev/shm" -o size=50%
    if [ -n "${DEBIAN_ROOT_BIND:-}" ]; then
      mkdir -p "$dir/${DEBIAN_ROOT_BIND#*:}"
      mount --bind "${DEBIAN_ROOT_BIND%%:*}" "$dir/${DEBIAN_ROOT_BIND#*:}"
    fi
    exec chroot "$dir" "$@"' sh "$dir" "$debian_cache/apt-$(cat "$dir/.ddl-release")" "$@"
}

# The processes whose root directory is DIR or lies under it.
debian_root_processes() {
  local real=$1 p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2> /dev/null) || continue
    case "$r" in "$real" | "$real"/*) echo "${p#/proc/}" ;; esac
  done
}

# Ends whatever still runs inside DIR or a root under it (a rank or daemon left behind by a failure), then
# removes DIR.
debian_root_remove() {
  local dir=$1 real pids
  [ -d "$dir" ] || return 0
  real=$(realpath "$dir")
  for _ in $(seq 50); do
    pids=$(debian_root_processes "$real")
    [ -z "$pids" ] && break
    kill -KILL $pids 2> /dev/null || true
    sleep 0.1
  done
  rm -rf "$dir"
}

# The host's Debian release (bookworm, trixie).
debian_host_release() { (. /etc/os-release && echo "$VERSION_CODENAME"); }
