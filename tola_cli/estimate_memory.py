"""GPU memory of one TOLA training iteration and of inference, per sample, for every gradient-checkpointing choice,
and the largest batch per GPU that fits 24/40/48/80/96 GB: measured on the meta device (no weights are read, nothing
is computed; its time on a CPU: docs/training_gpus.md). What is and is not measured:
``tola_plugin/models/memory_estimate.py`` (the report: ``tola_plugin/commands/estimate_memory.py``); the table for
options/train/train_TOLA.yml: docs/training_gpus.md.

    tola-estimate-memory -opt options/train/train_TOLA.yml
    tola-estimate-memory -opt options/train/train_TOLA.yml --size 128 512 --json results/memory.json
"""
import argparse

from tola_cli.command import run_command
from tola_cli.defaults import GPU_CAPACITIES_GB, GPU_RESERVE


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog='tola-estimate-memory', description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='training option file (network_g and train are read)')
    parser.add_argument('--size', type=int, nargs=2, default=(128, 512), metavar=('H', 'W'),
                        help='training / inference image size (default: 128 512, the paper)')
    parser.add_argument('--capacities', type=float, nargs='+', default=GPU_CAPACITIES_GB, metavar='GB',
                        help='GPU memory sizes to fit (default: 24 40 48 80 96)')
    parser.add_argument('--reserve', type=float, default=GPU_RESERVE,
                        help='share of each GPU left to the CUDA context, workspaces and fragmentation (0.1)')
    parser.add_argument('--json', help='also write every figure to this JSON file')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.estimate_memory import estimate_option_file  # (the package registers the plugin)
    return estimate_option_file(args.opt, args.size, args.capacities, args.reserve, args.json)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
