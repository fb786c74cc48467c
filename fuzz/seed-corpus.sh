#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ (git-ignored) with starting inputs: the hand-made seeds of
# fuzz/seeds/<target>/, plus the repository's own input files turned into target inputs:
#   yaml_loaders   every scenario, session, matrix and sim-profile YAML of examples/demo,
#                  cli/tests/fixtures and the upstream examples (UPSTREAM_DIR, default
#                  ../shared/upstream beside the repository), each prefixed with the selector
#                  digit of its loader;
#   bundle_unpack  examples/demo and cli/tests/fixtures/project packed as sorted GNU tars
#                  (selector 0, the target compresses them) and as tar.zst (selector 1).
# Safe to run again: files are named by content, so nothing is duplicated.
# Usage: bash fuzz/seed-corpus.sh   (from the repository root or anywhere)
set -euo pipefail

fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$fuzz_dir")"
upstream="${UPSTREAM_DIR:-$repo/../shared/upstream}"

# Writes stdin to <corpus>/<sha1 of the content>, the naming libFuzzer itself uses.
add() {
  local corpus="$1" tmp
  tmp="$(mktemp)"
  cat >"$tmp"
  mv "$tmp" "$corpus/$(sha1sum "$tmp" | cut -c1-40)"
}

# Prefixes a YAML file with the selector digit of the loader its directory implies.
add_yaml() {
  local file="$1" selector
  case "$file" in
    */sessions/*) selector=1 ;;
    */matrices/* | */matrix.yaml) selector=2 ;;
    */sim-profile*.yaml) selector=3 ;;
    */answer-policies/*) selector=5 ;;
    *) selector=0 ;;
  esac
  { printf '%s' "$selector"; cat "$file"; } | add "$fuzz_dir/corpus/yaml_loaders"
}

for target in yaml_loaders bundle_unpack bundle_roundtrip; do
  mkdir -p "$fuzz_dir/corpus/$target"
  if [ -d "$fuzz_dir/seeds/$target" ]; then
    for seed in "$fuzz_dir/seeds/$target"/*; do
      [ -f "$seed" ] && add "$fuzz_dir/corpus/$target" <"$seed"
    done
  fi
done

yaml_roots=("$repo/examples/demo" "$repo/cli/tests/fixtures")
[ -d "$upstream/examples" ] && yaml_roots+=("$upstream/examples")
while IFS= read -r -d '' file; do
  add_yaml "$file"
  # Every YAML also goes to the generic loader (selector 5): yaml_to_json, then frozen.
  { printf '5'; cat "$file"; } | add "$fuzz_dir/corpus/yaml_loaders"
done < <(find "${yaml_roots[@]}" -type f \( -name '*.yaml' -o -name '*.yml' \) -print0)

# Packs a directory the way `pack` lays a bundle out: relative paths without `./`, sorted, a
# directory entry before its contents, owner 0, mtime 0.
tar_of() {
  (cd "$1" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
    tar --format=gnu --owner=0 --group=0 --numeric-owner --mtime=@0 --no-recursion \
      -cf - -T -)
}
for dir in "$repo/examples/demo" "$repo/cli/tests/fixtures/project"; do
  [ -d "$dir" ] || continue
  { printf '0'; tar_of "$dir"; } | add "$fuzz_dir/corpus/bundle_unpack"
  { printf '1'; tar_of "$dir" | zstd -q -3 -c; } | add "$fuzz_dir/corpus/bundle_unpack"
done

for target in yaml_loaders bundle_unpack bundle_roundtrip; do
  printf '%s: %s inputs\n' "$target" "$(find "$fuzz_dir/corpus/$target" -type f | wc -l)"
done
