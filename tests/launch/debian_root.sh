# Sourced, not run: bare Debian root file systems for tests (root only), as a fresh machine has them.
#   debian_base RELEASE          prints the path of a tarball of `debootstrap --variant=minbase RELEASE`,
#                                made once and kept in $DDL_TEST_CACHE (default /var/cache/ddl-tests) for
#                                later runs; concurrent callers wait for the one that makes it
#   debian_root_make RELEASE DIR unpacks that base into DIR and gives it the Debian apt sources the host
#                                uses (the same mirrors, this release's suites)
#   debian_root_run DIR CMD...   runs CMD chrooted in DIR with /proc, /sys (and its cgroups), /dev,
#                                /dev/pts and a fresh /dev/shm mounted (downloaded packages kept in the cache for later runs);
#                                DEBIAN_ROOT_BIND=HOST_PATH:PATH also shows a host folder at PATH inside
#   debian_root_remove DIR       kills what still runs in DIR and removes it (call it on every exit path)
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
      if ! debootstrap --variant=minbase "$release" "$tmp/root" "${DDL_DEBIAN_MIRROR:-$(debian_host_mirror debian)}" \
          > "$tmp/debootstrap.log" 2>&1; then
        tail -20 "$tmp/debootstrap.log" >&2
        rm -rf "$tmp"
        exit 1
      fi
      tar -C "$tmp/root" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
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
    mount -t tmpfs shm "$dir/dev/shm" -o size=2g
    if [ -n "${DEBIAN_ROOT_BIND:-}" ]; then
      mkdir -p "$dir/${DEBIAN_ROOT_BIND#*:}"
      mount --bind "${DEBIAN_ROOT_BIND%%:*}" "$dir/${DEBIAN_ROOT_BIND#*:}"
    fi
    exec chroot "$dir" "$@"' sh "$dir" "$debian_cache/apt-$(cat "$dir/.ddl-release")" "$@"
}

# Ends whatever still runs inside DIR (a rank left behind by a failure) and removes it.
debian_root_remove() {
  local dir=$1 p real
  [ -d "$dir" ] || return 0
  real=$(realpath "$dir")
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$real" ] && kill -KILL "${p#/proc/}" 2>/dev/null
  done
  sleep 0.5
  rm -rf "$dir"
}
