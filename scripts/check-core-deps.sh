#!/usr/bin/env bash
# The pure core (core/, crate cowork-core) plans, folds, judges and admits without IO.
# The compiler holds that only if no IO crate is reachable: this check fails when its normal
# dependency tree holds an async runtime, a network client or server, Docker or Kubernetes.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='^(tokio|tokio-util|async-nats|aws-sdk-s3|aws-smithy-[a-z-]+|axum|hyper|hyper-util|reqwest|bollard|kube|kube-client|k8s-openapi|tonic|rustls|cowork-fabric|cowork-worker|cowork-coordinator) '
tree="$(cargo tree -p cowork-core -e normal --prefix none --locked)"
found="$(printf '%s\n' "$tree" | grep -E "$forbidden" | sort -u || true)"
if [ -n "$found" ]; then
  echo "cowork-core must stay pure, but its dependency tree holds:" >&2
  printf '  %s\n' "$found" >&2
  echo "move the code that needs these into cowork-coordinator (the service) instead" >&2
  exit 1
fi
echo "cowork-core: $(printf '%s\n' "$tree" | sort -u | wc -l) crates, none of them IO"
