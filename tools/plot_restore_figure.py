#!/usr/bin/env python
"""Figure of docs/restore.md: for text lines of several aspects, the input | the input stretched to 128x512 and
restored (DiffTSR's and the old tool's route) | restored with its aspect kept (TOLAPipeline); then a photo with the
lines PP-OCRv4 found | the photo restored in place. With --before-after: before | after for the six real lines of
tola_plugin/assets/samples (PP-OCRv4's readings, the labels) and the photo (why a line was left out).

    python tools/make_restore_samples.py --out demo_data/restore_samples
    python tools/plot_restore_figure.py --samples demo_data/restore_samples --out docs/images/restore_figure.png \\
        [--model experiments/demo_TOLA/TOLA_demo_merged.safetensors]
    python tools/plot_restore_figure.py --samples demo_data/restore_samples --before-after \\
        --out docs/images/samples_before_after.png

The PNG is palette-quantised to stay small (docs/ figures are committed).
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument('--samples', required=True, help='folder of tools/make_restore_samples.py')
    parser.add_argument('--out', required=True, help='output PNG')
    parser.add_argument('--model', help='merged TOLA model (default: the demo model, shipped with the package)')
    parser.add_argument('--device', default='cpu')
    parser.add_argument(
        '--before-after', action='store_true',
        help='the samples of tola_plugin/assets/samples and the photo, before | after, with their readings')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.demo.restore_figure import plot_restore_figure, plot_samples_before_after
    plot = plot_samples_before_after if args.before_after else plot_restore_figure
    return plot(args.samples, args.out, args.model, args.device)


if __name__ == '__main__':
    run_command(main, parse_args)
