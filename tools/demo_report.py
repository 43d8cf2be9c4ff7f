#!/usr/bin/env python
r"""The demo's last step: LR | TOLA | HR images, metrics.json and a grid figure under results/<name>/.

    python -m tola_plugin.test -opt options/demo/test_TOLA_demo.yml     # restores the held-out lines
    python tools/demo_report.py -opt options/demo/test_TOLA_demo.yml      # this tool

Writes results/<name>/{lr,tola,hr}/*.png, labels.tsv, eval/ (tools/evaluate.py's per-image CSVs and summary),
metrics.json (LR vs TOLA: PSNR/SSIM, PP-OCRv4 and TransOCR ACC/NED, the gains and the demo's targets) and
grid.png / grid.pdf; prints the table and a closing line (TOLA against its input, the shipped demo adaptation's
numbers for comparison). See docs/demo_backbone.md.
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='the test option file the test launcher ran')
    parser.add_argument('--grid-samples', type=int, default=6, help='lines shown in the grid (default 6)')
    parser.add_argument('--results-dir', help='default: results/<name of the option file>')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.demo.report import make_report, report_closing, report_table
    report = make_report(args.opt, args.grid_samples, args.results_dir)
    print(report_table(report))
    print(report_closing(report))
    return 0


if __name__ == '__main__':
    run_command(main, parse_args)
