#!/usr/bin/env bash
# Installs a built tapegrad into a fresh prefix and uses it the way a user would: the CMake package
# (tests/consumer, built with -Werror), the pkg-config file, the soname, and no CUDA header in the
# public headers. Usage: tools/check_install.sh [build dir, default ./build]. Run by ctest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
lib="$(find "$prefix" -name 'libtapegrad.so.*' -type f | head -n1)"
soname="$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')"
echo "installed $(basename "$lib"), soname $soname"
[[ "$soname" =~ ^libtapegrad\.so\.[0-9]+$ ]] || { echo "unexpected soname '$soname'"; exit 1; }
if grep -rlE '#include *<(cuda|cublas|cudnn)' "$prefix/include"; then
  echo "public headers include CUDA headers"; exit 1
fi

cmake -S "$root/tests/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log"
cmake --build "$work/consumer" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
LD_LIBRARY_PATH="$(dirname "$lib")" "$work/consumer/consumer"

pc_dir="$(dirname "$(find "$prefix" -name tapegrad.pc | head -n1)")"
# shellcheck disable=SC2046
c++ -Wall -Wextra -Werror "$root/tests/consumer/main.cpp" -o "$work/consumer_pc" \
  $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs tapegrad)
LD_LIBRARY_PATH="$(dirname "$lib")" "$work/consumer_pc" >/dev/null
echo "pkg-config build: ok"

# The build tree is a package too: no install step.
cmake -S "$root/tests/consumer" -B "$work/consumer_tree" -G Ninja -Dtapegrad_DIR="$build" >"$work/configure_tree.log"
cmake --build "$work/consumer_tree" >"$work/build_tree.log" || { cat "$work/build_tree.log"; exit 1; }
"$work/consumer_tree/consumer" >/dev/null
echo "build-tree package: ok"

# As a subproject (add_subdirectory), tapegrad brings the library alone: no tests, examples or
# benchmarks unless asked for. Configuring is enough to see which targets exist.
mkdir -p "$work/parent"
cat >"$work/parent/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(parent LANGUAGES CXX)
add_subdirectory("$root" tapegrad)
CMAKE
cmake -S "$work/parent" -B "$work/parent/build" -G Ninja -DTAPEGRAD_CUDA=OFF >"$work/parent.log" ||
  { cat "$work/parent.log"; exit 1; }
if grep -qE '^build (tapegrad/)?(tests|examples|benchmarks)/' "$work/parent/build/build.ninja"; then
  echo "a subproject build would build tests, examples or benchmarks"; exit 1
fi
grep -q 'libtapegrad.so' "$work/parent/build/build.ninja" || { echo "the subproject build lacks the library"; exit 1; }
echo "subproject defaults: ok"
