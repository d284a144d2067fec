#!/bin/bash
# Every C and C++ source of the project is as clang-format (.clang-format) writes it: the suite
# says so, so that a file left unformatted fails here rather than drifting until someone notices.
# Run from the repository root; skipped (77) without clang-format.
set -u
command -v clang-format >/dev/null || { echo "no clang-format: skipped"; exit 77; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.c' '*.cc' '*.cpp' '*.h')
else  # a source tree without its history (a release tarball)
  mapfile -t files < <(find bpf src tests bench -name '*.c' -o -name '*.cc' -o -name '*.cpp' \
    -o -name '*.h' | sort)
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue  # deleted in the work tree, not yet committed
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not as clang-format writes them (fix: clang-format -i FILE...):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "${#files[@]} files formatted"
