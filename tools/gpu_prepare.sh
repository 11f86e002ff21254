#!/usr/bin/env bash
# Assembles gpu_bundle/, what the one-shot GPU check (tools/gpu_check.sh) needs on a lent GPU machine
# that has nvcc, cmake, ninja, g++ and PyTorch but no internet and no apt: the Debian build
# dependencies as a relocatable prefix, cuDNN headers as a fallback, and a Fashion-MNIST subset.
# Run here (Debian 12, as root or with apt's lists present); prints the carry list and the command
# to give the device tool. See docs/gpu.md.
#
# Why a prefix unpacked here rather than .deb files unpacked there: dpkg may be missing there, the
# .pc files and symlinks need rewriting to be relocatable, and the static OpenBLAS archive (58 MB)
# and the unused reference BLAS/LAPACK can be dropped, so one gzip tarball (~15 MB) is all that
# travels and `tar -xzf` is all it takes there.
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=gpu_bundle
debs=gpu_bundle_debs  # download cache, never carried
train_images=${GPU_PREPARE_TRAIN_IMAGES:-10000}
limit_mib=64

# Build dependencies as found by cmake/Dependencies.cmake, tests/ and benchmarks/ (the -dev
# packages), their runtime libraries, and pkgconf for a machine without pkg-config.
packages=(libopenblas-openmp-dev libopenblas0-openmp libgfortran5 libquadmath0
          libgtest-dev googletest libbenchmark-dev libbenchmark1debian
          nlohmann-json3-dev libcxxopts-dev zlib1g-dev zlib1g pkgconf-bin libpkgconf3)

mkdir -p "$debs" "$bundle"
missing=()
for p in "${packages[@]}"; do
  compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "downloading: ${missing[*]}"
  if ! (cd "$debs" && apt-get download "${missing[@]}" >/dev/null 2>&1); then
    [ "$(id -u)" -eq 0 ] || { echo "apt-get download failed; run 'apt-get update' as root first" >&2; exit 1; }
    apt-get update -qq
    (cd "$debs" && apt-get download "${missing[@]}" >/dev/null)
  fi
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$stage/prefix"; done
prefix="$stage/prefix"
blas="$prefix/usr/lib/x86_64-linux-gnu/openblas-openmp"

# Trim what the build never uses: docs, static OpenBLAS, the reference-API BLAS/LAPACK shims
# (libopenblas.so.0 holds LAPACK itself), the alternatives placeholders.
rm -rf "$prefix/usr/share/doc" "$prefix/usr/share/man" "$prefix/usr/share/lintian" \
       "$prefix/usr/lib/x86_64-linux-gnu/cmake/openblas"
rm -f "$blas"/*.a "$blas"/libblas.so* "$blas"/liblapack.so* "$blas"/pkgconfig/blas-openblas.pc \
      "$blas"/pkgconfig/lapack-openblas.pc

# Absolute symlinks (libz.so -> /lib/...) become relative so the prefix works wherever it lands.
while IFS= read -r link; do
  target="$(readlink "$link")"
  if [ -e "$prefix$target" ]; then
    ln -sfn "$(realpath -s --relative-to="$(dirname "$link")" "$prefix$target")" "$link"
  else
    echo "warning: dropping dangling link ${link#"$prefix"} -> $target" >&2
    rm -f "$link"
  fi
done < <(find "$prefix" -type l -lname '/*')
find "$prefix" -xtype l -delete  # links into what was trimmed

# .pc files: absolute /usr paths become ${pcfiledir}-relative.
while IFS= read -r pc; do
  rel="${pc#"$prefix"/}"
  up="$(dirname "$rel" | sed 's|[^/]*|..|g')"
  sed -E -i "s#(^[A-Za-z_]+=|-I|-L)/usr#\\1\${pcfiledir}/$up/usr#g" "$pc"
done < <(find "$prefix" -name '*.pc' -type f)

# What the carried binaries ask of the machine's C and C++ runtimes (glibc, libstdc++).
needs="$(find "$prefix" \( -name '*.so*' -o -path '*/bin/*' \) -type f -print0 | xargs -0 objdump -T 2>/dev/null |
         grep -oE 'GLIBC_[0-9.]+|GLIBCXX_[0-9.]+' | sort -uV |
         awk -F_ '{last[$1]=$0} END {print last["GLIBC"], last["GLIBCXX"]}')"

rm -rf "${bundle:?}/deps.tar.gz" "$bundle/cudnn-include" "$bundle/fashion-mnist"
tar -C "$prefix" -czf "$bundle/deps.tar.gz" .

# cuDNN headers, used there only when the machine's cuDNN came without them (pip wheels do ship them).
cudnn_h="$(ls /usr/local/cuda/include/cudnn_version.h "${CUDNN_ROOT:-/nonexistent}"/include/cudnn_version.h 2>/dev/null | head -n1 || true)"
if [ -n "$cudnn_h" ]; then
  mkdir -p "$bundle/cudnn-include"
  cp "$(dirname "$cudnn_h")"/cudnn*.h "$bundle/cudnn-include/"
fi

# A Fashion-MNIST subset: the first N training images (still a valid IDX file) and the full test set.
data=/usr/share/datasets/fashion-mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$bundle/fashion-mnist"
  cp "$data"/t10k-*-ubyte.gz "$bundle/fashion-mnist/"
  python3 - "$data" "$bundle/fashion-mnist" "$train_images" <<'EOF'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, item_bytes in (("train-images-idx3-ubyte.gz", 28 * 28), ("train-labels-idx1-ubyte.gz", 1)):
    raw = gzip.open(f"{src}/{name}").read()
    ndim = raw[3]
    dims = list(struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim]))
    keep = min(n, dims[0])
    dims[0] = keep
    header = raw[:4] + struct.pack(f">{ndim}I", *dims)
    body = raw[4 + 4 * ndim: 4 + 4 * ndim + keep * item_bytes]
    with gzip.open(f"{dst}/{name}", "wb", compresslevel=9) as f:
        f.write(header + body)
EOF
else
  echo "warning: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist); the fashion examples will be skipped there" >&2
fi

{
  echo "assembled $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "needs at least: ${needs:-unknown} (libbenchmark needs GLIBCXX_3.4.30, i.e. g++ >= 12's libstdc++)"
  for d in "$debs"/*.deb; do dpkg-deb -f "$d" Package Version | sed 's/^[^:]*: //' | paste -sd' '; done
} >"$bundle/MANIFEST.txt"

bundle_bytes=$(du -sb "$bundle" | cut -f1)
tree_bytes=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -n1 | cut -f1)
total_mib=$(( (bundle_bytes + tree_bytes + 1048575) / 1048576 ))
echo "gpu_bundle: $(du -sh "$bundle" | cut -f1) (deps $(du -sh "$bundle/deps.tar.gz" | cut -f1)); working tree $((tree_bytes / 1024)) KiB; together ~${total_mib} MiB of the ${limit_mib} MiB limit"
echo "carried binaries need: ${needs:-unknown}"
if [ "$total_mib" -gt "$limit_mib" ]; then
  echo "error: over the ${limit_mib} MiB transfer limit" >&2
  exit 1
fi
cat <<EOF

Device call (one run, one machine start; see docs/gpu.md):
  carry:     ["$bundle"]
  timeout_s: 480
  command:   bash tools/gpu_check.sh
EOF
