#!/usr/bin/env bash
# Checks that every tracked C++/CUDA source is formatted with the project's .clang-format, using
# clang-format 14 (Debian 12's; another version formats some constructs differently). Lists the
# files that differ and how to fix them; exit status 1 when any does.
# --fix formats them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
formatter="${CLANG_FORMAT:-clang-format-14}"
command -v "$formatter" >/dev/null || { echo "check_format: $formatter not found (apt-get install clang-format-14)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' '*.hpp' '*.cc')
if [ "${1:-}" = "--fix" ]; then
  "$formatter" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$formatter" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files are not formatted with .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix with: bash tools/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: all ${#files[@]} files formatted"
