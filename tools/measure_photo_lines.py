#!/usr/bin/env python
"""Which restored lines of a photo should replace the originals: PP-OCRv4's accuracy on the lines of rendered photos
with known texts, originals against restored, and under the rule tola-infer --paste checked applies (docs/restore.md,
"Which lines are pasted"). Example:
    python tools/measure_photo_lines.py --photos 25 --out results/photo_lines.json
"""
import argparse

from tola_cli.command import run_command
from tola_cli.defaults import COLOR_FIXES, DEFAULT_COLOR_FIX


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--photos', type=int, default=25, help='rendered photos of four lines each [25]')
    p.add_argument('--seed', type=int, default=0, help='texts and placement [0]')
    p.add_argument('--model', help='merged TOLA model (default: the demo model)')
    p.add_argument('--color-fix', default=DEFAULT_COLOR_FIX, choices=COLOR_FIXES, help=f'[{DEFAULT_COLOR_FIX}]')
    p.add_argument('--out', default='results/photo_lines.json', help='JSON of every line and the summary')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from tola_lab.benchmarks.photo_lines import measure_photo_lines
    measure_photo_lines(args.out, args.photos, args.seed, args.model, args.color_fix)
    return 0


if __name__ == '__main__':
    run_command(main, parse_args)
