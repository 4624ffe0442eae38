#!/usr/bin/env bash
# Install what is needed, check the code (ruff) and its import contracts (lint-imports, both
# configured in pyproject.toml), then run the test suite (headless: Qt runs offscreen).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/ruff check .
.venv/bin/lint-imports
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
