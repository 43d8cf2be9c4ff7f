#!/usr/bin/env bash
# One-time set-up of a fresh machine: a local virtualenv with the pinned stack, this package
# (editable), a CJK font for the text renderer, and headless Chromium for the web demo's browser test.
# Called by `make` (README's first two commands).
# Usage: bash tools/setup_env.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
PYTHON=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/pip"
# torch first: torch 2.14.1 brings setuptools>=77, which basicsr's build needs without isolation.
"$PIP" install -q torch==2.14.1 torchvision==0.29.1
"$PIP" install -q -r requirements.txt
# basicsr 1.4.2 is an sdist whose setup_requires would pull a whole torch into an isolated build env.
"$PIP" install -q --no-build-isolation basicsr==1.4.2
# pyiqa's declared deps (transformers, accelerate, bitsandbytes, ...) are not needed for our metrics.
"$PIP" install -q --no-deps pyiqa==0.1.16
"$PIP" install -q --no-deps --no-build-isolation -e .

# A CJK font for tools/render_text.py: install one where we can (Debian, as root), else say so.
if ! fc-list :lang=zh 2>/dev/null | grep -q .; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      fontconfig fonts-wqy-microhei fonts-wqy-zenhei fonts-arphic-ukai >/dev/null
  else
    echo "WARNING: no Chinese font found. Install one (Debian: sudo apt-get install fonts-wqy-microhei)" \
         "or pass --font to tools/render_text.py." >&2
  fi
fi
# Headless Chromium and its driver for the web demo's browser test (tests/test_web_demo.py; skipped without them).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
  else
    echo "WARNING: no chromium/chromedriver; the browser test of tola-web will be skipped" \
         "(Debian: sudo apt-get install chromium chromium-driver)." >&2
  fi
fi
"$VENV/bin/python" -c "import tola_plugin" && touch "$VENV/.installed"
echo "Environment ready: $VENV"
