#!/usr/bin/env bash
# The GPU check (docs/training_gpus.md, "The GPU check"). Installs the carried wheels into a private folder (never
# into the image's Python), then runs tools/gpu_check.py. Two places it runs from:
#   bash tools/gpu_check.sh REPORT_DIR [--deadline S] [--steps a,b] [--dry-run] [--work DIR]
#       in a checkout: the checkout's own package (on PYTHONPATH) with the carry of `make gpu-carry` (build/gpu_carry,
#       or TOLA_GPU_CHECK_CARRY=DIR): what a lease that sends the checkout brings beside it
#   bash gpu_check.sh REPORT_DIR ...      in the folder `make gpu-bundle` wrote: its own wheel of the package
# PYTHON: the Python with torch (default python3; CPython 3.10-3.12). TOLA_GPU_CHECK_SITE: the private folder
# (default: a folder of $TMPDIR named for this Python and the wheels' hashes, so a folder made by another Python or
# from other wheels is never taken for this one).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON=${PYTHON:-python3}
if [ -f "$HERE/MANIFEST.json" ] && [ -d "$HERE/wheels" ]; then    # the bundle's folder
  ROOT="$HERE"; CARRY="$HERE"; EXTRA_PATH=""
elif [ -f "$HERE/../setup.py" ]; then                              # a checkout's tools/
  ROOT="$(cd "$HERE/.." && pwd)"; CARRY="${TOLA_GPU_CHECK_CARRY:-$ROOT/build/gpu_carry}"; EXTRA_PATH="$ROOT"
  if [ ! -f "$CARRY/MANIFEST.json" ]; then
    echo "error: no GPU carry at $CARRY (MANIFEST.json): run 'make gpu-carry' in the checkout first, or set" \
         "TOLA_GPU_CHECK_CARRY" >&2
    exit 2
  fi
else
  echo "error: $HERE is neither a GPU bundle (MANIFEST.json, wheels/) nor a checkout's tools/ folder" >&2
  exit 2
fi
TAG=$("$PYTHON" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
WHEELS=()
for wheel in "$CARRY"/wheels/*.whl; do
  case "$(basename "$wheel")" in
    *-none-any.whl|*-"$TAG"-*) WHEELS+=("$wheel") ;;
  esac
done
for name in lmdb rapidfuzz; do                                     # the wheels tied to CPython's ABI
  found=0
  for wheel in "${WHEELS[@]}"; do [[ "$(basename "$wheel")" == "$name"-* ]] && found=1; done
  if [ "$found" = 0 ]; then
    echo "error: the carry has no $name wheel for $TAG ($PYTHON); it carries:" \
         "$(cd "$CARRY/wheels" && ls $name-* | tr '\n' ' ') (build the carry for this Python: make gpu-carry" \
         "GPU_PYTHONS=${TAG:2:1}.${TAG:3}; or set PYTHON to a CPython the carry has)" >&2
    exit 2
  fi
done
KEY="$TAG-$(cat "${WHEELS[@]}" | sha256sum | cut -c1-16)"
export TOLA_GPU_CHECK_SITE=${TOLA_GPU_CHECK_SITE:-${TMPDIR:-/tmp}/tola_gpu_check_site_$KEY}
if [ "$(cat "$TOLA_GPU_CHECK_SITE/.installed" 2>/dev/null || true)" != "$KEY" ]; then
  rm -rf "$TOLA_GPU_CHECK_SITE"
  echo "installing ${#WHEELS[@]} wheels for $TAG into $TOLA_GPU_CHECK_SITE" >&2
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    --target "$TOLA_GPU_CHECK_SITE" "${WHEELS[@]}"
  # The private folder works as an installed environment: its .pth files run at every interpreter start (the plugin's
  # import hook, as `pip install` puts it beside the packages; from a checkout, written from the checkout's hook).
  printf 'import os, site\nsite.addsitedir(os.path.dirname(os.path.abspath(__file__)))\n' \
    > "$TOLA_GPU_CHECK_SITE/sitecustomize.py"
  if [ -n "$EXTRA_PATH" ]; then
    "$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import tola_plugin_hook; tola_plugin_hook.write_pth(sys.argv[2])' \
      "$ROOT" "$TOLA_GPU_CHECK_SITE" >/dev/null
  fi
  echo "$KEY" > "$TOLA_GPU_CHECK_SITE/.installed"
fi
export PYTHONPATH="$TOLA_GPU_CHECK_SITE${EXTRA_PATH:+:$EXTRA_PATH}${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
exec "$PYTHON" "$ROOT/tools/gpu_check.py" "$@" --bundle "$ROOT" --data "$CARRY"
