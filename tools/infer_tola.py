#!/usr/bin/env python
"""Alias of ``tola-infer`` (tola_cli/infer.py): restore text images of any size and aspect, or whole photos
(--detect), with a TOLA model. ``python tools/infer_tola.py --help`` lists the options; docs/restore.md explains.

    python tools/infer_tola.py -i LR_DIR -o results/TOLA --model checkpoints/TOLA_merged.safetensors
    python tools/infer_tola.py -i LR_DIR -o results/TOLA -opt options/test/test_TOLA.yml
"""
from tola_cli.infer import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
