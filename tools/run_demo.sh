#!/usr/bin/env bash
# The README demo: render text lines, train on CPU, validate, then test and write images and metrics.
# Usage: bash tools/run_demo.sh [PYTHON] [tola|rrdb]   (make demo passes the project virtualenv's python)
#   tola (default): TOLA's whole pipeline on a tiny random DiffTSR-shaped backbone (options/demo/*TOLA_demo.yml)
#   rrdb:           a stock BasicSR RRDBNet x4 baseline on the same kind of data (options/demo/train_RRDB_demo.yml)
set -euo pipefail
PY=${1:-python}
WHAT=${2:-tola}
cd "$(dirname "$0")/.."
# The demo's networks are tiny: one thread avoids OpenMP overhead that dominates them on CPU.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

case "$WHAT" in
  tola)
    [ -f demo_data/train/labels.tsv ] || $PY tools/render_text.py --num 64 --seed 0 --out demo_data/train
    [ -f demo_data/val/labels.tsv ] || $PY tools/render_text.py --num 8 --seed 1 --out demo_data/val
    $PY -m tola_plugin.train -opt options/demo/train_TOLA_demo.yml
    $PY -m tola_plugin.test -opt options/demo/test_TOLA_demo.yml
    echo "Demo done: training log and checkpoints in experiments/demo_TOLA/," \
         "restored images and metrics in results/demo_TOLA_test/"
    ;;
  rrdb)
    D=demo_data/rrdb
    if [ ! -f $D/val_labels.tsv ]; then
      $PY tools/render_text.py --num 240 --seed 0 --out $D/train --labels $D/train_labels.tsv --lq-out $D/train_lq_x4
      $PY tools/render_text.py --num 8 --seed 1 --out $D/val --labels $D/val_labels.tsv --lq-out $D/val_lq_x4
    fi
    $PY -m tola_plugin.train -opt options/demo/train_RRDB_demo.yml
    echo "Demo done: log, checkpoints and validation images under experiments/demo_RRDB_x4/"
    ;;
  *)
    echo "unknown demo '$WHAT' (expected tola or rrdb)" >&2; exit 2 ;;
esac
