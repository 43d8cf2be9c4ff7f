#!/usr/bin/env python
"""GPU memory of one TOLA training iteration and of inference, per sample, for every gradient-checkpointing choice,
and the largest batch per GPU that fits 24/40/48/80/96 GB: measured on the meta device (no weights are read, nothing
is computed; about a minute on a CPU for the full-size network). What is and is not measured:
``tola_plugin/evaluation/memory_estimate.py``; the table for options/train/train_TOLA.yml: docs/training_gpus.md.

    python tools/estimate_memory.py -opt options/train/train_TOLA.yml
    python tools/estimate_memory.py -opt options/train/train_TOLA.yml --size 128 512 --json results/memory.json
"""
import argparse
import json
import os

import tola_plugin  # noqa: F401  (first: makes basicsr importable, registers the plugin)

# isort: split
from tola_plugin.evaluation.memory_estimate import CAPACITIES_GB, RESERVE, estimate, report_markdown
from tola_plugin.utils.cli_errors import UsageError, run_tool
from tola_plugin.utils.option_checks import check_typed_block


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
    import yaml

    from basicsr.utils.registry import ARCH_REGISTRY
    args = parse_args(argv)
    if not os.path.isfile(args.opt):
        raise UsageError(f'-opt {args.opt!r}: no such option file')
    if any(s <= 0 or s % 8 for s in args.size):
        raise UsageError(f'--size {args.size}: height and width must be positive multiples of 8')
    if not 0 <= args.reserve < 1:
        raise UsageError(f'--reserve {args.reserve}: expected a share in [0, 1)')
    with open(args.opt, encoding='utf-8') as f:
        opt = yaml.safe_load(f)
    if not isinstance(opt, dict) or 'network_g' not in opt:
        raise UsageError(f'-opt {args.opt!r}: not an option file with network_g')
    check_typed_block(opt['network_g'], ARCH_REGISTRY, 'network_g')
    result = estimate(opt, size=args.size, capacities=args.capacities, reserve=args.reserve)
    result['option_file'] = args.opt
    print(f'{args.opt}: memory of one training iteration and of inference, measured on the meta device\n')
    print(report_markdown(result))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    run_tool(main)
