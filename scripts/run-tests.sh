#!/usr/bin/env bash
# Install what is needed, then run the test suite (headless: Qt runs offscreen).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
