#!/usr/bin/env python
"""Write what the GPU check takes to a GPU machine with a stock CUDA PyTorch image (docs/training_gpus.md, "The GPU
check"): the carry beside this checkout (``make gpu-carry``: the checkout and it under 60 MiB; run there with ``bash
tools/gpu_check.sh REPORT_DIR``), or one folder to copy anywhere (``make gpu-bundle``: ``bash gpu_check.sh
REPORT_DIR`` in it).

    python tools/gpu_bundle.py --checkout --out build/gpu_carry
    python tools/gpu_bundle.py --out build/gpu_bundle
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--checkout', action='store_true',
                        help='write the carry beside this checkout (dependency wheels and data, no package wheel)')
    parser.add_argument('--out', help='the folder (replaced; default build/gpu_carry with --checkout, else '
                        'build/gpu_bundle)')
    parser.add_argument('--wheel-cache',
                        help='folder of fetched and built wheels (default: the user cache, tola-plugin/gpu-wheels)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.lab.gpu_check.bundle import build_bundle, build_carry
    if args.checkout:
        build_carry(args.out or 'build/gpu_carry', args.wheel_cache)
    else:
        build_bundle(args.out or 'build/gpu_bundle', args.wheel_cache)
    return 0


if __name__ == '__main__':
    run_command(main, parse_args)
