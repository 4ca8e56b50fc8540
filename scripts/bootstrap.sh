#!/usr/bin/env bash
# Sets up everything ptdebug needs on a machine that has never seen it:
# Debian packages (reference decoder, debuggers, perf), a virtualenv with the
# Python dependencies, the Cython extensions built in place, and Delve.
# Idempotent: each step checks before it installs, so it is cheap to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# emacs-nox and elpa-dap-mode: a DAP client nobody here wrote, for tests/clients.
for pkg in libipt-dev libipt2 linux-perf build-essential python3-dev emacs-nox elpa-dap-mode; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "bootstrap: installing Debian packages: ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv"
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "Cython>=3.0" "setuptools>=77" wheel
echo "bootstrap: installing ptdebug (editable) with test extras"
.venv/bin/python -m pip install -q --no-build-isolation -e '.[test]'
# Editable installs leave the compiled modules where setuptools chose; build
# them in place as well so the source tree imports the same code.
.venv/bin/python setup.py -q build_ext --inplace >/dev/null

# Go (fixtures, Delve): the machine's toolchain where there is one, else Debian's.
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
    echo "bootstrap: installing Debian's Go toolchain"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq golang-go >/dev/null
fi
[ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"
# Delve, for the Go backend (go install builds it from the Go module proxy).
if command -v go >/dev/null 2>&1; then
    GOBIN_DIR="$(go env GOPATH)/bin"
    if [ ! -x "$GOBIN_DIR/dlv" ]; then
        echo "bootstrap: installing Delve"
        go install github.com/go-delve/delve/cmd/dlv@latest || echo "bootstrap: warning: Delve install failed; Go tests will say why" >&2
    fi
fi

# --- VS Code extension (vscode-extension/; owned by the extension's maintainers) -----------
# Node and npm build, test and package the extension (tests/vscode runs them). `npm ci`
# installs exactly package-lock.json, and only when the lock changed since the last install.
if ! command -v npm >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "bootstrap: installing Node.js and npm"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
if ! cmp -s vscode-extension/package-lock.json vscode-extension/node_modules/.package-lock.json.installed; then
    echo "bootstrap: npm ci in vscode-extension/"
    (cd vscode-extension && npm ci --no-audit --no-fund --loglevel=error \
        && cp package-lock.json node_modules/.package-lock.json.installed) \
        || echo "bootstrap: warning: npm ci failed; tests/vscode will say why" >&2
fi
echo "bootstrap: ready"
