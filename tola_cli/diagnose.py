r"""Paired statistics and recognition diagnostics between two evaluated methods (supplement, Tables S9-S13).

Reads the per-image CSVs that tola-evaluate (tools/evaluate.py) wrote, e.g.
    tola-diagnose --eval-dir results/eval --baseline DiffTSR --method TOLA \
        --prior-csv results/TOLA/prior.csv --out results/diagnostics

Writes <out>/diagnostics.json and <out>/diagnostics.md (and with --plots the recognition-diagnostics figure).
Paired bootstrap: 5,000 filename-paired resamples (seeded); exact McNemar test for ACC. See docs/evaluation.md.
"""
import argparse

from tola_cli.command import run_command
from tola_cli.defaults import BOOTSTRAP_RESAMPLES, RECOGNIZER_PREFIXES


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='tola-diagnose', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--eval-dir', required=True, help='output folder of tools/evaluate.py')
    p.add_argument('--eval-dir-baseline', help='evaluate.py folder of the baseline if it differs from --eval-dir')
    p.add_argument('--baseline', required=True, help='method name A (e.g. DiffTSR)')
    p.add_argument('--method', required=True, help='method name B (e.g. TOLA); changes are B - A')
    p.add_argument(
        '--prior-csv', help='per-image prior CSV (filename, prior_text, prior_confidence) of the '
        'TOLA inference tool; enables confidence bins and prior strata')
    p.add_argument(
        '--recognizer', choices=RECOGNIZER_PREFIXES,
        help='whose ACC/NED to diagnose (default: TransOCR when both evaluations have its columns, '
        'else PP-OCRv4)')
    p.add_argument('--resamples', type=int, default=BOOTSTRAP_RESAMPLES, help='bootstrap resamples (paper: 5000)')
    p.add_argument('--seed', type=int, default=0, help='bootstrap seed')
    p.add_argument('--out', required=True, help='output folder')
    p.add_argument('--plots', action='store_true', help='also draw the recognition-diagnostics figure (PNG+PDF)')
    return p


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.evaluation.diagnostics import diagnose_evaluations
    text = diagnose_evaluations(args.eval_dir, args.baseline, args.method, args.out, args.eval_dir_baseline,
                                args.prior_csv, args.recognizer, args.resamples, args.seed, args.plots)
    print(text, end='')
    return 0


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
