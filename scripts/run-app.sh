#!/usr/bin/env bash
# Install what is needed, then start attnviz on its default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh app
exec .venv/bin/attnviz "$@"
