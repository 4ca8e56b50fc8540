#!/usr/bin/env bash
# `ptdebug demo` on a fresh machine: sets itself up, then runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/ptdebug demo "$@"
