#!/usr/bin/env bash
# The commands a sweep's owner runs the morning after a big sweep, measured: wall time, peak
# RSS (GNU time's maxrss) and output size of each, on a store of two sweeps of a 1,000-cell
# matrix (1,000 models x one skill dir) x --repeat N on the simulator.
#
#   scripts/bench-morning-after.sh [REPEAT] [WORK_DIR]
#
# REPEAT defaults to 100 (100,000 runs a sweep). WORK_DIR (default /tmp/cowork-morning-after)
# holds the store and the outputs and is removed at the end unless KEEP=1. COWORK names the
# binary (default: the release build under CARGO_TARGET_DIR or ./target).
set -euo pipefail

repeat="${1:-100}"
work="${2:-/tmp/cowork-morning-after}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
cowork="${COWORK:-${CARGO_TARGET_DIR:-$repo/target}/release/cowork}"
[ -x "$cowork" ] || { echo "no cowork binary at $cowork (cargo build --release -p cowork-cli)" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "GNU time (/usr/bin/time) is needed" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
cp -r "$repo/examples/demo" "$work/demo"
cd "$work/demo"
store="$work/store"

# 1,000 models; 20 cells fail at pass rates 0.30-0.68 in both sweeps, and 7 more fail in the
# second sweep only; the rest pass every run (so `diff` has exactly 7 changes to show).
python3 - <<'EOF'
models = ['m%04d' % i for i in range(1000)]
open('matrix-1000.yaml', 'w').write(
    'models: [%s]\nskill_dirs:\n  - skills/v1/csv-report\n' % ', '.join(models))
failing = {models[i]: round(0.3 + 0.02 * k, 2) for k, i in enumerate(range(5, 1000, 50))}
def profile(path, rules):
    body = ''.join('  - model: %s\n    pass_rate: %s\n' % rule for rule in rules.items())
    body += '  - pass_rate: 1.0\n    cost_usd: 0.05\n    duration_ms: 40000\n'
    open(path, 'w').write('rules:\n' + body)
profile('profile-a.yaml', failing)
second = dict(failing)
for i in [7, 123, 250, 444, 610, 777, 901]:
    second[models[i]] = 0.0
profile('profile-b.yaml', second)
EOF

measure() {
  local name="$1" out="$2"
  shift 2
  local status=0
  /usr/bin/time -f "%e %M" -o "$work/time" "$@" > "$out" 2> "$work/stderr" || status=$?
  read -r wall rss < <(tail -1 "$work/time")
  local size
  size=$(stat -c %s "$out")
  printf '| %s | %s s | %s MiB | %s bytes | exit %s |\n' "$name" "$wall" "$((rss / 1024))" "$size" "$status"
}

echo "| command | wall | peak RSS | stdout / file size | exit |"
echo "|---|---|---|---|---|"
for sweep in a b; do
  measure "run (sweep $sweep, $((repeat * 1000)) runs)" "$work/run-$sweep.out" \
    "$cowork" run scenarios/csv-report.yaml --matrix matrix-1000.yaml --max-cells 1000 \
    --repeat "$repeat" --executor sim --sim-profile "profile-$sweep.yaml" --min-pass-rate 0.8 \
    --store "$store"
done
measure "report --format html" "$work/report.log" \
  "$cowork" report latest --store "$store" --format html -o "$work/report.html"
echo "| (report.html) | | | $(stat -c %s "$work/report.html") bytes | |"
for format in markdown junit json; do
  measure "report --format $format" "$work/report.$format" \
    "$cowork" report latest --store "$store" --format "$format"
done
measure "rollup latest" "$work/rollup.out" "$cowork" rollup latest --store "$store"
measure "rollup latest --output-format json" "$work/rollup.json" \
  "$cowork" rollup latest --store "$store" --output-format json
measure "batches" "$work/batches.out" "$cowork" batches --store "$store"
measure "diff latest~1 latest" "$work/diff.out" "$cowork" diff latest~1 latest --store "$store"
measure "trend --last 2" "$work/trend.out" \
  "$cowork" trend scenarios/csv-report.yaml --last 2 --store "$store"
# Last: it writes the batch's next generation (it reads every job record and runs none).
measure "resume latest (decided, nothing to run)" "$work/resume.out" \
  "$cowork" resume latest --store "$store"

echo
echo "diff:"
cat "$work/diff.out"
if [ "${KEEP:-0}" != 1 ]; then
  rm -rf "$work"
fi
