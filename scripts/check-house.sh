#!/usr/bin/env bash
# The house rules the codemap (docs/architecture.md) promises, counted by tools/house-check:
# no non-test file over 800 lines, no non-test function over 100 lines, no import circle between
# sibling modules of one crate. Arguments go to house-check (`--report` prints without failing).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet --locked -p cowork-house-check -- --root . "$@"
