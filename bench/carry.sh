#!/usr/bin/env bash
# Gathers what ddl's benchmarks need on a machine without a package registry (../shared/docs/measuring.md):
# the executables of build/launch and build/bench, stripped, and the .so files they load that are not part
# of the C runtime or of that machine's own Open MPI, into one xz tarball, dist/ddl-bin.tar.xz, beside
# the PyTorch peer scripts of ../shared/peers in dist/peers (../shared does not travel). Libraries under
# lib/ are always used there; those under fallback/ (libcurl's chain, zlib, libmpi_cxx) only where the
# machine has none of that name. bench/sixteen_ranks.sh unpacks it; carry the folder dist (ignored by git).
#   bash bench/carry.sh [BUILD=build] [DIST=dist]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dist=${2:-dist}
shared=${DDL_SHARED:-../shared}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/fallback" "$dist/peers"
bins=("$build"/launch/ddl_train "$build"/launch/ddl_data "$build"/bench/allreduce_bandwidth)
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "carry.sh: $b is missing: build it first (cmake --build $build)" >&2; exit 1; }
  strip --strip-unneeded -o "$stage/bin/$(basename "$b")" "$b"
done
# Never carried: the C and C++ runtimes (that machine's are newer), and Open MPI with what it loads (its
# mpirun must match its own libmpi).
never='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s|libmpi|libopen-pal|libopen-rte|libhwloc|libevent.*|libudev)\.so'
fallback='^(libmpi_cxx|libz|libcurl|libnghttp2|libidn2|librtmp|libssh2|libpsl|libssl|libcrypto|libgssapi_krb5|libldap.*|liblber.*|libzstd|libbrotli.*|libunistring|libgnutls|libhogweed|libnettle|libgmp|libkrb5.*|libk5crypto|libcom_err|libkeyutils|libsasl2|libp11-kit|libtasn1|libffi)\.so'
ldd "${bins[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  if [[ $name =~ $never && ! $name =~ ^libmpi_cxx ]]; then continue; fi
  if [[ $name =~ $fallback ]]; then cp -L "$path" "$stage/fallback/$name"; else cp -L "$path" "$stage/lib/$name"; fi
done
tar -C "$stage" -cf - bin lib fallback | xz -T0 -6 > "$dist/ddl-bin.tar.xz"
cp "$shared"/peers/pytorch_ddp_bench.py "$dist/peers/"
git describe --always --dirty > "$dist/COMMIT" 2> /dev/null || true
echo "carry.sh: $dist/ddl-bin.tar.xz $(du -h "$dist/ddl-bin.tar.xz" | cut -f1) ($(ls "$stage/bin" | tr '\n' ' ')+ $(ls "$stage/lib" | wc -l) libraries, $(ls "$stage/fallback" | wc -l) fallbacks); carry: $dist"
