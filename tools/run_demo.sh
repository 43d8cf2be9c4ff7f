#!/usr/bin/env bash
# The README demo: render text lines, adapt the small demo backbone with TOLA on CPU, restore held-out lines,
# then write LR | TOLA | HR images, metrics.json and a grid figure.
# Usage: bash tools/run_demo.sh [PYTHON] [tola|rrdb]   (make demo passes the project virtualenv's python)
#   tola (default): TOLA (LoRA + LRC) on the shipped demo backbone (options/demo/*TOLA_demo.yml);
#                   results in results/demo_TOLA_test/, the merged model in experiments/demo_TOLA/
#   rrdb:           a stock BasicSR RRDBNet x4 baseline on the same kind of data (options/demo/train_RRDB_demo.yml)
set -euo pipefail
PY=${1:-python}
WHAT=${2:-tola}
cd "$(dirname "$0")/.."
# Two threads (the budget is 2 cores): about 1.5x faster per adaptation iteration than one (docs/demo_backbone.md).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

case "$WHAT" in
  tola)
    D=demo_data
    [ -f $D/tola_train/labels.tsv ] || $PY tools/render_text.py --num 200 --seed 0 --chinese-chars demo --out $D/tola_train
    [ -f $D/tola_val/labels.tsv ] || $PY tools/render_text.py --num 32 --seed 1 --chinese-chars demo --out $D/tola_val
    # LPIPS-VGG (the paper's perceptual term) needs torchvision's ImageNet VGG16 file; nothing is downloaded.
    VGG16=${TORCH_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/torch}/hub/checkpoints/vgg16-397923af.pth
    if [ -f "$VGG16" ]; then
      echo "LPIPS-VGG on: $VGG16 found (objective L1 + LPIPS-VGG + 0.02 OCR CE)"
      LPIPS=(--force_yml train:perceptual_opt:loss_weight=1.0)
    else
      echo "LPIPS-VGG off: $VGG16 not found (objective L1 + 0.02 OCR CE)"
      LPIPS=()
    fi
    $PY -m tola_plugin.train -opt options/demo/train_TOLA_demo.yml "${LPIPS[@]}"
    $PY -m tola_plugin.test -opt options/demo/test_TOLA_demo.yml
    $PY tools/export_merged.py -opt options/demo/test_TOLA_demo.yml \
        --out experiments/demo_TOLA/TOLA_demo_merged.safetensors
    $PY tools/demo_report.py -opt options/demo/test_TOLA_demo.yml
    echo "Demo done in ${SECONDS} s: training log and checkpoints in experiments/demo_TOLA/ (merged model" \
         "experiments/demo_TOLA/TOLA_demo_merged.safetensors); LR, TOLA and HR images, metrics.json and" \
         "grid.png in results/demo_TOLA_test/"
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
