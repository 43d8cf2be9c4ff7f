#!/usr/bin/env bash
# The GPU check, the entry point of the bundle `make gpu-bundle` writes (docs/training_gpus.md, "The GPU check").
# Installs the bundle's wheels into a private folder (never into the image's Python), then runs tools/gpu_check.py.
#   bash gpu_check.sh REPORT_DIR [--dry-run] [--work DIR]
# PYTHON: the Python with torch (default python3; CPython 3.12, the wheels' ABI); TOLA_GPU_CHECK_SITE: the private
# folder (default: site/ beside this script). A dry run on another Python installs the pure-Python wheels only and
# takes the binary ones from that Python's environment (they are built for 3.12).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON=${PYTHON:-python3}
export TOLA_GPU_CHECK_SITE=${TOLA_GPU_CHECK_SITE:-$HERE/site}
DRY_RUN=0
for arg in "$@"; do [ "$arg" = --dry-run ] && DRY_RUN=1; done
VERSION=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
WHEELS=("$HERE"/wheels/*.whl)
if [ "$VERSION" != 3.12 ]; then
  if [ "$DRY_RUN" = 0 ]; then
    echo "error: $PYTHON is Python $VERSION; the bundle's wheels are for CPython 3.12 (set PYTHON=...)" >&2
    exit 2
  fi
  WHEELS=("$HERE"/wheels/*-none-any.whl)
  echo "dry run on Python $VERSION: installing the ${#WHEELS[@]} pure-Python wheels only" >&2
fi
if [ ! -f "$TOLA_GPU_CHECK_SITE/.installed" ]; then
  rm -rf "$TOLA_GPU_CHECK_SITE"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    --target "$TOLA_GPU_CHECK_SITE" "${WHEELS[@]}"
  touch "$TOLA_GPU_CHECK_SITE/.installed"
fi
export PYTHONPATH="$TOLA_GPU_CHECK_SITE${PYTHONPATH:+:$PYTHONPATH}"
cd "$HERE"
exec "$PYTHON" tools/gpu_check.py "$@"
