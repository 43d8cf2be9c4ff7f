r"""Draw the paper's result figures (PNG + PDF).

    # (1) quality-latency scatter: seconds per image from a CSV (method,seconds_per_image) and/or the JSON of
    #     tools/benchmark_inference.py, PSNR/ACC from tools/evaluate.py summaries (or psnr/t_acc columns in the
    #     CSV); without ACC anywhere, the PSNR panel alone
    tola-plot-results latency --latency latency.csv --summary results/eval/summary.json \
        --highlight TOLA --out figures/quality_latency
    tola-plot-results latency --benchmark results/benchmark/inference.json --latency others.csv \
        --summary results/eval/summary.json --highlight TOLA --out figures/quality_latency
    # (2) recognition diagnostics (three panels) from tools/diagnose.py output
    tola-plot-results diagnostics --diagnostics results/diagnostics/diagnostics.json \
        --out figures/recognition_diagnostics
    # (3) comparison grid: rows LR, methods, HR; columns samples (titles from a labels manifest)
    tola-plot-results grid --row LR=data/LR --row DiffTSR=results/DiffTSR --row TOLA=results/TOLA \
        --row HR=data/HR --samples 00001.png,00002.png --labels data/labels.tsv --out figures/grid
"""
import argparse

from tola_cli.command import run_command


def parse_name_value(spec: str):
    if '=' not in spec:
        raise argparse.ArgumentTypeError(f'expected LABEL=FOLDER, got {spec!r}')
    return tuple(spec.split('=', 1))


def parse_samples(spec: str):
    """Comma-separated file names -> list (blanks dropped)."""
    return [s.strip() for s in spec.split(',') if s.strip()]


def build_parser():
    p = argparse.ArgumentParser(prog='tola-plot-results', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='figure', required=True)
    lat = sub.add_parser('latency', help='quality-latency scatter (PSNR and ACC vs seconds per image)')
    lat.add_argument('--latency', help='CSV: method,seconds_per_image[,psnr,t_acc]')
    lat.add_argument('--benchmark', help='JSON of tools/benchmark_inference.py: its batch-1 seconds per image')
    lat.add_argument('--benchmark-method', default='TOLA', help='method name of the --benchmark point (TOLA)')
    lat.add_argument(
        '--benchmark-route', default='auto',
        help='route of the --benchmark JSON: auto (called default in files before issue 50), reference, "torch fp32", '
        '"openvino bf16", ... (default: auto)')
    lat.add_argument('--summary', action='append', default=[], help='summary.json of tools/evaluate.py (repeatable)')
    lat.add_argument('--highlight', help='method drawn as a star (e.g. TOLA)')
    lat.add_argument('--out', required=True, help='output path without extension')
    dia = sub.add_parser('diagnostics', help='recognition diagnostics, three panels')
    dia.add_argument('--diagnostics', required=True, help='diagnostics.json of tools/diagnose.py')
    dia.add_argument('--out', required=True, help='output path without extension')
    grid = sub.add_parser('grid', help='comparison grid (rows LR, methods, HR; columns samples)')
    grid.add_argument('--row', action='append', type=parse_name_value, required=True, metavar='LABEL=FOLDER')
    grid.add_argument('--samples', required=True, type=parse_samples, help='comma-separated file names (the columns)')
    grid.add_argument('--labels', help='labels manifest: column titles = transcriptions')
    grid.add_argument('--out', required=True, help='output path without extension')
    return p


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.evaluation import plots
    if args.figure == 'latency':
        paths = plots.plot_quality_latency(args.out, args.latency, args.benchmark, args.benchmark_method,
                                           args.benchmark_route, args.summary, args.highlight)
    elif args.figure == 'diagnostics':
        paths = plots.plot_recognition_diagnostics(args.diagnostics, args.out)
    else:
        paths = plots.plot_comparison_grid(args.row, args.samples, args.out, args.labels)
    print('\n'.join(paths))
    return 0


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
