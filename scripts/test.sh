#!/usr/bin/env bash
# The whole test suite on a fresh machine: sets itself up, lints (ruff), then runs pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k packet).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# The real-VS-Code tier's code-server, Chromium and Playwright (tests/vscode_ui): cached under
# ~/.cache/ptdebug, so only a fresh machine pays the build (5-6 minutes on 2 cores).
bash scripts/vscode_setup.sh \
    || echo "test: warning: scripts/vscode_setup.sh failed; tests/vscode_ui will say why" >&2
export PATH="$(go env GOPATH 2>/dev/null || echo /nonexistent)/bin:$PATH"
# Lint and type checks first (seconds; the rules are [tool.ruff.lint] and [tool.mypy] in
# pyproject.toml, and vscode-extension/eslint.config.mjs): a failure stops here.
echo "test: ruff check"
.venv/bin/ruff check .
echo "test: mypy"
.venv/bin/mypy
echo "test: eslint (vscode-extension)"
(cd vscode-extension && npm run --silent lint)
# Two workers (PTDEBUG_TEST_WORKERS; 0 runs in this process): a test waits on its debuggers and
# programs most of the time, so two share these two cores well; the tests of one file run on
# one worker (--dist loadfile), so that a file's fixtures are built once.
exec .venv/bin/python -m pytest -n "${PTDEBUG_TEST_WORKERS:-2}" --dist loadfile "$@"
