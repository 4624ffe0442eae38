#!/usr/bin/env bash
# Install what is needed, check the code (ruff) and its import contracts (lint-imports, both
# configured in pyproject.toml), then run the test suite (headless: Qt runs offscreen).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/ruff check .
.venv/bin/lint-imports
# Compiled modules kept (__pycache__, ignored by git) whatever the environment asks: each process
# then reads the modules and pytest's rewritten test files compiled by an earlier run, instead of
# compiling every one of them again at each start.
unset PYTHONDONTWRITEBYTECODE
# Two processes (pytest-xdist), each test file whole on one of them (its module fixtures made once):
# the tests are mostly one-core work, and these machines have two; each process keeps BLAS and the
# quantised kernels to its share of the cores (tests/conftest.py). Arguments after these win
# (`-n 0`: one process, as pdb needs, with every core).
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile "$@"
