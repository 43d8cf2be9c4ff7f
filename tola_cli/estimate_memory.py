#!/usr/bin/env python
"""GPU memory of one TOLA training iteration and of inference, per sample, for every gradient-checkpointing choice,
and the largest batch per GPU that fits 24/40/48/80/96 GB: measured on the meta device (no weights are read, nothing
is computed; about a minute on a CPU for the full-size network). What is and is not measured:
``tola_plugin/evaluation/memory_estimate.py``; the table for options/train/train_TOLA.yml: docs/training_gpus.md.

    python tools/estimate_memory.py -opt options/train/train_TOLA.yml
    python tools/estimate_memory.py -opt options/train/train_TOLA.yml --size 128 512 --json results/memory.json
"""
import argparse

import tola_plugin  # noqa: F401  (first: makes basicsr importable, registers the plugin)

# isort: split
from tola_plugin.evaluation.memory_estimate import CAPACITIES_GB, RESERVE, estimate_option_file
from tola_plugin.utils.cli_errors import run_tool


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='training option file (network_g and train are read)')
    parser.add_argument('--size', type=int, nargs=2, default=(128, 512), metavar=('H', 'W'),
                        help='training / inference image size (default: 128 512, the paper)')
    parser.add_argument('--capacities', type=float, nargs='+', default=CAPACITIES_GB, metavar='GB',
                        help='GPU memory sizes to fit (default: 24 40 48 80 96)')
    parser.add_argument('--reserve', type=float, default=RESERVE,
                        help='share of each GPU left to the CUDA context, workspaces and fragmentation (0.1)')
    parser.add_argument('--json', help='also write every figure to this JSON file')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return estimate_option_file(args.opt, args.size, args.capacities, args.reserve, args.json)


if __name__ == '__main__':
    run_tool(main)
