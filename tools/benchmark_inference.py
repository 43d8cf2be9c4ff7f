#!/usr/bin/env python
"""TOLA inference on this machine: every route and precision against the reference route and the machine's own
matmul ceiling, the batched photo path, peak memory, and the precisions' quality on trained weights.

    python tools/benchmark_inference.py --random-weights --out results/benchmark/inference.json
    python tools/benchmark_inference.py --random-weights --quality-model \\
        experiments/demo_TOLA/TOLA_demo_merged.safetensors --out results/benchmark/inference.json   # after make demo
    python tools/benchmark_inference.py -opt options/test/test_TOLA.yml --checkpoint net_g.pth --out ...
    python tools/benchmark_inference.py --random-weights --train-iteration options/train/train_TOLA.yml
    python tools/benchmark_inference.py --folder-model experiments/demo_TOLA/TOLA_demo_merged.safetensors
    python tools/benchmark_inference.py --precision-table --random-weights --out results/benchmark/precision.json

Routes (tola_lab/benchmarks/inference_benchmark.py): reference (DiffTSR's way), torch and openvino in each
--precision, and default (what tola-infer, TOLAPipeline and tola-web run here by default). Prints a markdown table
with seconds per image, GMAC/s and the share of the measured matmul ceiling, images per second of a folder run
at the pipeline's own batch and at one window per call, the issue's targets met or not, and writes JSON
(``tools/plot_results.py latency --benchmark`` reads it). Timed runs need a quiet machine. ``--precision-table``:
instead, where each stage's low precision moves the one-step latent ẑ0 and the image (the demo backbone's frozen
route on ``--lines`` rendered lines, and the option file's network on the qualification's probe) and the speed of
each per-stage plan (``tola_lab/benchmarks/precision_route.py``; docs/inference.md, "Precision").
"""
import argparse
import os
import sys

from tola_cli.command import run_command
from tola_cli.defaults import PRECISIONS

DEFAULT_OPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'options', 'test', 'test_TOLA.yml')
DEMO_TEST_OPT = os.path.join('options', 'demo', 'test_TOLA_demo.yml')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument('-opt', default=DEFAULT_OPT, help='option file with a TOLANet network_g (default: %(default)s)')
    p.add_argument('--checkpoint', help='adaptation checkpoint (default: the option file\'s path.pretrain_network_g)')
    p.add_argument('--random-weights', action='store_true',
                   help='full-size random backbone and random LoRA/LRC values (no files needed)')
    p.add_argument('--repeats', type=int, default=3, help='timed runs per route (median; default 3)')
    p.add_argument(
        '--precision', nargs='+', choices=[p for p in PRECISIONS if p != 'auto'],
        help='precisions of the torch and openvino routes, each on every stage (default: fp32, and bf16 / fp16 '
        'where this CPU has their instructions: an emulated precision is minutes per path for nothing)')
    p.add_argument('--photo-lines', type=int, default=8,
                   help='lines of the batched photo path, vs as many single calls (default 8; 1: skip)')
    p.add_argument('--no-memory', action='store_true', help='skip the peak-RSS processes')
    p.add_argument(
        '--folder-lines', type=int, default=32,
        help="lines of the folder run timed at the pipeline's own batch and at one window per call (default 32; 0: "
        'skip)')
    p.add_argument('--folder-model', help='instead: only the folder run, of this merged model (e.g. the demo model)')
    p.add_argument('--quality-model', help='merged model with trained weights for the quality table (e.g. the demo '
                   'model of make demo)')
    p.add_argument('--quality-opt', default=DEMO_TEST_OPT,
                   help='test option file whose held-out lines the quality table restores (default: %(default)s)')
    p.add_argument('--quality-lines', type=int, help='use only the first N held-out lines')
    p.add_argument(
        '--train-iteration', metavar='TRAIN_OPT',
        help='instead: time one training iteration of this training option file (batch 1), before and '
        'after the fast text-prior decoding')
    p.add_argument(
        '--precision-table', action='store_true',
        help="instead: each stage's low-precision error in ẑ0 and the image, and each per-stage plan's speed")
    p.add_argument('--lines', type=int, default=8,
                   help='with --precision-table: rendered lines of the demo backbone\'s table (default 8)')
    p.add_argument('--workdir', help='folder for the exported merged file (default: a temporary folder, removed)')
    p.add_argument('--out', help='write the results as JSON here (and the table as .md next to it)')
    args = p.parse_args(argv)
    if args.repeats < 1 or args.photo_lines < 1 or args.lines < 1:
        p.error('--repeats, --photo-lines and --lines must be positive')
    if args.folder_lines < 0 or (args.folder_model and args.folder_lines < 1):
        p.error(f'--folder-lines must be positive (0: skip, without --folder-model), got {args.folder_lines}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.benchmarks.inference_benchmark import benchmark_and_write, fast_precisions
    command = ' '.join(['python tools/benchmark_inference.py'] + list(sys.argv[1:] if argv is None else argv))
    precisions = args.precision or fast_precisions()
    benchmark_and_write(args.opt, args.checkpoint, args.random_weights, precisions, args.repeats, args.photo_lines,
                        not args.no_memory, args.quality_model, args.quality_opt, args.quality_lines, args.workdir,
                        command, args.train_iteration, args.out, args.folder_lines, args.folder_model,
                        args.precision_table, args.lines)
    return 0


if __name__ == '__main__':
    run_command(main, parse_args)
