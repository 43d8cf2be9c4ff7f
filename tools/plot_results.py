r"""Draw the paper's result figures (PNG + PDF).

    # (1) quality-latency scatter: seconds per image from a CSV (method,seconds_per_image) and/or the JSON of
    #     tools/benchmark_inference.py, PSNR/ACC from tools/evaluate.py summaries (or psnr/t_acc columns in the
    #     CSV); without ACC anywhere, the PSNR panel alone
    python tools/plot_results.py latency --latency latency.csv --summary results/eval/summary.json \
        --highlight TOLA --out figures/quality_latency
    python tools/plot_results.py latency --benchmark results/benchmark/inference.json --latency others.csv \
        --summary results/eval/summary.json --highlight TOLA --out figures/quality_latency
    # (2) recognition diagnostics (three panels) from tools/diagnose.py output
    python tools/plot_results.py diagnostics --diagnostics results/diagnostics/diagnostics.json \
        --out figures/recognition_diagnostics
    # (3) comparison grid: rows LR, methods, HR; columns samples (titles from a labels manifest)
    python tools/plot_results.py grid --row LR=data/LR --row DiffTSR=results/DiffTSR --row TOLA=results/TOLA \
        --row HR=data/HR --samples 00001.png,00002.png --labels data/labels.tsv --out figures/grid
"""
import argparse
import csv
import json

from tola_plugin.evaluation import plots
from tola_plugin.evaluation.records import read_labels
from tola_plugin.utils.cli_errors import UsageError, run_tool


def _name_value(spec: str):
    if '=' not in spec:
        raise argparse.ArgumentTypeError(f'expected LABEL=FOLDER, got {spec!r}')
    return tuple(spec.split('=', 1))


def read_latency_csv(path: str):
    """CSV with columns method, seconds_per_image (optionally psnr, t_acc) -> ({method: s}, {method: metrics})."""
    latency, metrics = {}, {}
    with open(path, encoding='utf-8', newline='') as f:
        reader = csv.DictReader(f)
        if not {'method', 'seconds_per_image'} <= set(reader.fieldnames or []):
            raise UsageError(f'{path} needs columns method, seconds_per_image (got {reader.fieldnames})')
        for row in reader:
            latency[row['method']] = float(row['seconds_per_image'])
            metrics[row['method']] = {k: float(row[k]) for k in ('psnr', 't_acc') if row.get(k)}
    return latency, metrics


def read_benchmark_json(path: str, method: str, route: str = 'default', batch: int = 1):
    """tools/benchmark_inference.py's JSON -> ({method: seconds per image of ``route`` at ``batch``}, {})."""
    with open(path, encoding='utf-8') as f:
        timings = json.load(f).get('timings', {})
    key = f'{route} batch {batch}'
    if key not in timings:
        raise ValueError(f'{path}: no timing {key!r} (have {sorted(timings)}); is it a benchmark_inference.py JSON?')
    return {method: float(timings[key]['per_image_s'])}, {}


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='figure', required=True)
    lat = sub.add_parser('latency', help='quality-latency scatter (PSNR and ACC vs seconds per image)')
    lat.add_argument('--latency', help='CSV: method,seconds_per_image[,psnr,t_acc]')
    lat.add_argument('--benchmark', help='JSON of tools/benchmark_inference.py: its batch-1 seconds per image')
    lat.add_argument('--benchmark-method', default='TOLA', help='method name of the --benchmark point (TOLA)')
    lat.add_argument(
        '--benchmark-route', default='default',
        help='route of the --benchmark JSON: default, reference, "torch fp32", "openvino bf16", ... '
        '(default: default)')
    lat.add_argument('--summary', action='append', default=[], help='summary.json of tools/evaluate.py (repeatable)')
    lat.add_argument('--highlight', help='method drawn as a star (e.g. TOLA)')
    lat.add_argument('--out', required=True, help='output path without extension')
    dia = sub.add_parser('diagnostics', help='recognition diagnostics, three panels')
    dia.add_argument('--diagnostics', required=True, help='diagnostics.json of tools/diagnose.py')
    dia.add_argument('--out', required=True, help='output path without extension')
    grid = sub.add_parser('grid', help='comparison grid (rows LR, methods, HR; columns samples)')
    grid.add_argument('--row', action='append', type=_name_value, required=True, metavar='LABEL=FOLDER')
    grid.add_argument('--samples', required=True, help='comma-separated file names (the columns)')
    grid.add_argument('--labels', help='labels manifest: column titles = transcriptions')
    grid.add_argument('--out', required=True, help='output path without extension')
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.figure == 'latency':
        if not args.latency and not args.benchmark:
            raise ValueError('latency: give --latency CSV and/or --benchmark JSON')
        latency, own = read_latency_csv(args.latency) if args.latency else ({}, {})
        if args.benchmark:
            latency.update(read_benchmark_json(args.benchmark, args.benchmark_method, args.benchmark_route)[0])
        summaries = [own]
        for path in args.summary:
            with open(path, encoding='utf-8') as f:
                summaries.insert(0, json.load(f)['summary'])  # the CSV's own columns win
        paths = plots.quality_latency_figure(plots.latency_points(latency, summaries), args.out, args.highlight)
    elif args.figure == 'diagnostics':
        with open(args.diagnostics, encoding='utf-8') as f:
            paths = plots.recognition_diagnostics_figure(json.load(f), args.out)
    else:
        samples = [s.strip() for s in args.samples.split(',') if s.strip()]
        titles = None
        if args.labels:
            labels = read_labels(args.labels)
            missing = [s for s in samples if s not in labels]
            if missing:
                raise UsageError(f'{args.labels} has no label for {missing}')
            titles = [labels[s] for s in samples]
        paths = plots.comparison_grid(plots.load_grid_rows(args.row, samples), args.out, titles)
    print('\n'.join(paths))
    return 0


if __name__ == '__main__':
    run_tool(main)
