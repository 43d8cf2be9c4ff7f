#!/usr/bin/env python
"""Write the GPU bundle (``make gpu-bundle``): one folder, under 60 MiB, to copy to a GPU machine with a stock CUDA
PyTorch image and run there with ``bash gpu_check.sh REPORT_DIR`` (docs/training_gpus.md, "The GPU check").

    python tools/gpu_bundle.py --out build/gpu_bundle
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', default='build/gpu_bundle', help='the bundle folder (replaced; build/gpu_bundle)')
    parser.add_argument('--wheel-cache',
                        help='folder of fetched and built wheels (default: the user cache, tola-plugin/gpu-wheels)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.gpu_check.bundle import build_bundle
    build_bundle(args.out, args.wheel_cache)
    return 0


if __name__ == '__main__':
    run_command(main, parse_args)
