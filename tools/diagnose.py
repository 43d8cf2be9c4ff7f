r"""Paired statistics and recognition diagnostics between two evaluated methods (supplement, Tables S9-S13).

Reads the per-image CSVs that tools/evaluate.py wrote, e.g.
    python tools/diagnose.py --eval-dir results/eval --baseline DiffTSR --method TOLA \
        --prior-csv results/TOLA/prior.csv --out results/diagnostics

Writes <out>/diagnostics.json and <out>/diagnostics.md (and with --plots the recognition-diagnostics figure).
Paired bootstrap: 5,000 filename-paired resamples (seeded); exact McNemar test for ACC. See docs/evaluation.md.
"""
import argparse
import json
import os

from tola_plugin.evaluation import records as R
from tola_plugin.evaluation.diagnostics import diagnose, diagnostics_markdown
from tola_plugin.evaluation.statistics import N_RESAMPLES
from tola_plugin.inference.prior_csv import read_prior_csv
from tola_plugin.utils.atomic_files import write_json
from tola_plugin.utils.cli_errors import UsageError, run_tool


def load_method(eval_dir: str, summary: dict, method: str):
    files = summary.get('per_image', {})
    if method not in files:
        raise UsageError(f'method {method!r} not in {os.path.join(eval_dir, "summary.json")} '
                         f'(has {sorted(files)})')
    return R.read_per_image_csv(os.path.join(eval_dir, files[method]))


def pick_recognizer(a: dict, b: dict) -> str:
    """The first recognizer (TransOCR, then PP-OCRv4) whose predictions both per-image tables have; TransOCR
    when neither has any (only the paired image-metric statistics are computed then)."""
    for name in ('transocr', 'ppocrv4'):
        column = f'{R.PREFIX[name]}pred'
        if all(column in row for rows in (a, b) for row in rows.values()):
            return name
    return 'transocr'


def case_handling(summary: dict, recognizer: str) -> bool:
    """Whether an evaluation lower-cased ``recognizer``'s texts (PP-OCRv4 by default, see tools/evaluate.py)."""
    protocol = summary['protocol']
    if recognizer == 'ppocrv4':
        return bool(protocol.get('ppocr_lower_case', protocol['lower_case']))
    return bool(protocol['lower_case'])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--eval-dir', required=True, help='output folder of tools/evaluate.py')
    p.add_argument('--eval-dir-baseline', help='evaluate.py folder of the baseline if it differs from --eval-dir')
    p.add_argument('--baseline', required=True, help='method name A (e.g. DiffTSR)')
    p.add_argument('--method', required=True, help='method name B (e.g. TOLA); changes are B - A')
    p.add_argument(
        '--prior-csv', help='per-image prior CSV (filename, prior_text, prior_confidence) of the '
        'TOLA inference tool; enables confidence bins and prior strata')
    p.add_argument(
        '--recognizer', choices=tuple(R.PREFIX),
        help='whose ACC/NED to diagnose (default: TransOCR when both evaluations have its columns, '
        'else PP-OCRv4)')
    p.add_argument('--resamples', type=int, default=N_RESAMPLES, help='bootstrap resamples (paper: 5000)')
    p.add_argument('--seed', type=int, default=0, help='bootstrap seed')
    p.add_argument('--out', required=True, help='output folder')
    p.add_argument('--plots', action='store_true', help='also draw the recognition-diagnostics figure (PNG+PDF)')
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    with open(os.path.join(args.eval_dir, 'summary.json'), encoding='utf-8') as f:
        summary_b = json.load(f)
    base_dir = args.eval_dir_baseline or args.eval_dir
    with open(os.path.join(base_dir, 'summary.json'), encoding='utf-8') as f:
        summary_a = json.load(f)
    a = load_method(base_dir, summary_a, args.baseline)
    b = load_method(args.eval_dir, summary_b, args.method)
    recognizer = args.recognizer or pick_recognizer(a, b)
    lower = case_handling(summary_b, recognizer)
    if case_handling(summary_a, recognizer) != lower:
        raise UsageError('the two evaluations used different case handling (--lower / --ppocr-case-sensitive)')
    names = R.match_filenames({f'baseline {args.baseline!r}': list(a), f'method {args.method!r}': list(b)})
    labels = {}
    for n in names:
        if 'gt' in a[n] and 'gt' in b[n]:
            if a[n]['gt'] != b[n]['gt']:
                raise UsageError(f'{n}: the two evaluations have different labels')
            labels[n] = a[n]['gt']
    if len(labels) != len(names):
        labels = {n: '' for n in names}  # image metrics only: no recognition diagnostics
    priors = read_prior_csv(args.prior_csv) if args.prior_csv else None
    result = diagnose(a, b, names, labels, priors, (args.baseline, args.method), R.PREFIX[recognizer], lower,
                      args.resamples, args.seed)
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, 'diagnostics.json'), result)
    text = diagnostics_markdown(result)
    with open(os.path.join(args.out, 'diagnostics.md'), 'w', encoding='utf-8') as f:
        f.write(text)
    if args.plots:
        from tola_plugin.evaluation.plots import recognition_diagnostics_figure
        recognition_diagnostics_figure(result, os.path.join(args.out, 'recognition_diagnostics'))
    print(text, end='')
    return 0


if __name__ == '__main__':
    run_tool(main)
