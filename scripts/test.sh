#!/usr/bin/env bash
# The whole test suite on a fresh machine: sets itself up, then runs pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k packet).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$(go env GOPATH 2>/dev/null || echo /nonexistent)/bin:$PATH"
exec .venv/bin/python -m pytest "$@"
