#!/usr/bin/env bash
# Start the loopback control plane by hand (builds it once per machine if needed), with the CRDs, fake
# racks, the service and kube-scheduler; Ctrl-C stops everything. Pass --help for the options, e.g.
#   tests/e2e/controlplane/up.sh --dir /tmp/plane --racks 2x2x4 --scheduler
#   tests/e2e/controlplane/up.sh --version 1.36.2 --racks 2x2x4 --scheduler   (Workload API served)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python3
cd "$REPO"
exec "$PY" "$HERE/start.py" "$@"
