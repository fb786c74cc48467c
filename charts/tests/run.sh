#!/usr/bin/env bash
# Renders charts/cowork-fleet with a real Helm engine and validates every manifest offline
# (charts/tests/test_chart.py). Needs only python3 and PyPI: the Helm engine is Helm v4's Go SDK
# shipped as a native library in the `helm-python-sdk` wheel (no helm binary, no cluster), and
# the Kubernetes 1.33 schemas ship inside `kubernetes-validate`.
#
#   charts/tests/run.sh            # installs the pinned packages into a venv, runs pytest
#   charts/tests/run.sh -k keda    # extra arguments go to pytest
#
# The venv lives outside the clone so CI reuses it between runs; set COWORK_CHART_VENV to move it.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${COWORK_CHART_VENV:-${HOME}/.cache/cowork-fleet/chart-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# Pinned: the engine (Helm SDK v4.2.3 inside), the schemas (K8s up to 1.33) and their readers.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  helm-python-sdk==0.2.2 \
  kubernetes-validate==1.33.1 \
  jsonschema==4.26.0 \
  referencing==0.37.0 \
  PyYAML==6.0.4 \
  pytest==9.2.0

exec "$venv/bin/python" -m pytest -q charts/tests/test_chart.py "$@"
