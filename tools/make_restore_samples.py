#!/usr/bin/env python
"""Write low-resolution samples for ``tola-infer``: text lines of aspect 1:1 to 1:20 (lines/, transcriptions in
lines/labels.tsv) and a photo with several lines at different angles (photo.png, its lines in photo.txt), rendered
here and bicubic-downsampled.

    python tools/make_restore_samples.py --out demo_data/restore_samples
    tola-infer -i demo_data/restore_samples/lines -o results/restore_lines
    tola-infer -i demo_data/restore_samples/photo.png -o results/restore_photo --detect

Same seed, same bytes. docs/restore.md shows what TOLA makes of them (tools/plot_restore_figure.py).
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument('--out', required=True, help='output folder (lines/, photo.png, photo.txt); must not exist')
    parser.add_argument('--scale', type=int, default=4, help='line downsampling factor (4; the photo: 3)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--font', help='font file (default: the first fontconfig Chinese font covering a text)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.data_preparation.restore_samples import write_restore_samples
    return write_restore_samples(args.out, args.scale, args.seed, args.font)


if __name__ == '__main__':
    run_command(main, parse_args)
