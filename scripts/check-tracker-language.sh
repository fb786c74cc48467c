#!/usr/bin/env bash
# No tracker language in the repository: code, docs and tests say what a thing is, not which
# issue or which of an issue's numbered points asked for it ("row 4", "issue 22"). Those numbers
# mean nothing to someone who clones the repository; the commit log keeps the history.
set -euo pipefail
cd "$(dirname "$0")/.."

pattern='\b(rows? [0-9]+|issues? #?[0-9]+)\b'
# This script names the pattern it looks for; Cargo.lock is generated.
if hits="$(git grep -nIiE "$pattern" -- . ':!Cargo.lock' ':!scripts/check-tracker-language.sh')"; then
  echo "tracker language (say what the thing is instead of which issue point asked for it):" >&2
  printf '%s\n' "$hits" >&2
  exit 1
fi
echo "no tracker language"
