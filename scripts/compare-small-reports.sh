#!/usr/bin/env bash
# Do two builds of cowork read small batches the same? Runs four small sim batches with the
# OLD binary (a matrix x --repeat, a plain --repeat, a plain files batch, a plain matrix), then
# reads each of them with both binaries, each on a fresh copy of the store: every report
# format and the re-judged rollup (its summary on stderr, its table on stdout, its envelope).
# Prints which outputs are byte-identical and a diff of each one that is not.
#
#   scripts/compare-small-reports.sh OLD_COWORK NEW_COWORK [WORK_DIR]
#
# WORK_DIR (default: a temp dir) keeps every output when KEEP=1.
set -euo pipefail

old="$(realpath "$1")"
new="$(realpath "$2")"
work="${3:-$(mktemp -d)}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
rm -rf "$work/store" "$work/old" "$work/new" "$work/read-store" "$work/batches"
mkdir -p "$work"
cd "$repo/examples/demo"

batches=(
  "matrix-repeat|scenarios/csv-report.yaml --repeat 5 --matrix matrix.yaml --sim-profile sim-profile.yaml --min-pass-rate 0.8"
  "repeat|scenarios/csv-report.yaml --repeat 4 --sim-profile sim-profile.yaml"
  "files|scenarios --sim-profile sim-profile.yaml"
  "matrix|scenarios/csv-report.yaml --matrix matrix.yaml --sim-profile sim-profile.yaml"
)
for entry in "${batches[@]}"; do
  name="${entry%%|*}"
  # shellcheck disable=SC2086 # the arguments are split on purpose
  "$old" run ${entry#*|} --executor sim --store "$work/store" >/dev/null 2>&1 || true
  echo "$name $(ls -t "$work/store/batches" | head -n1)" >>"$work/batches"
done

identical=0
different=0
while read -r name batch; do
  for side in old new; do
    bin="$old"
    [ "$side" = new ] && bin="$new"
    out="$work/$side/$name"
    # Each binary reads a fresh copy at the same path (the HTML links files relative to it).
    store="$work/read-store"
    rm -rf "$store"
    cp -r "$work/store" "$store"
    mkdir -p "$out"
    for format in html markdown junit json; do
      "$bin" report "$batch" --store "$store" --format "$format" -o "$out/report.$format" \
        >/dev/null 2>&1 || true
    done
    "$bin" rollup "$batch" --store "$store" >"$out/rollup.stdout" 2>"$out/rollup.stderr" || true
    "$bin" rollup "$batch" --store "$store" --output-format json >"$out/rollup.json" 2>/dev/null || true
  done
  for file in "$work/old/$name"/*; do
    file="$(basename "$file")"
    if cmp -s "$work/old/$name/$file" "$work/new/$name/$file"; then
      identical=$((identical + 1))
      echo "same       $name/$file ($(stat -c %s "$work/new/$name/$file") bytes)"
    else
      different=$((different + 1))
      echo "DIFFERENT  $name/$file"
      diff <(tr '>' '\n' <"$work/old/$name/$file") <(tr '>' '\n' <"$work/new/$name/$file") \
        | head -n 20 | sed 's/^/    /' || true
    fi
  done
done <"$work/batches"
echo "$identical identical, $different different"
