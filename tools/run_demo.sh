#!/usr/bin/env bash
# The README demo: render text lines, train the demo model on CPU, validate, write sample images.
# Usage: bash tools/run_demo.sh [PYTHON]   (make demo passes the project virtualenv's python)
set -euo pipefail
PY=${1:-python}
cd "$(dirname "$0")/.."
D=demo_data/rrdb
if [ ! -f $D/val_labels.tsv ]; then
  $PY tools/render_text.py --num 240 --seed 0 --out $D/train --labels $D/train_labels.tsv --lq-out $D/train_lq_x4
  $PY tools/render_text.py --num 8 --seed 1 --out $D/val --labels $D/val_labels.tsv --lq-out $D/val_lq_x4
fi
$PY -m tola_plugin.train -opt options/demo/train_RRDB_demo.yml
echo "Demo done: log, checkpoints and validation images under experiments/demo_RRDB_x4/"
