#!/usr/bin/env python
"""Write what the GPU check takes to a GPU machine with a stock CUDA PyTorch image (docs/training_gpus.md, "The GPU
check"): the carry beside this checkout (``make gpu-carry``: the checkout and it under 60 MiB; run there with ``bash
tools/gpu_check.sh REPORT_DIR``), or one folder to copy anywhere (``make gpu-bundle``: ``bash gpu_check.sh
REPORT_DIR`` in it).

    python tools/gpu_bundle.py --checkout --out build/gpu_carry
    python tools/gpu_bundle.py --checkout --pythons 3.12      # the ABI-tied wheels for CPython 3.12 only
    python tools/gpu_bundle.py --out build/gpu_bundle
"""
import argparse

from tola_cli.command import run_command

PYTHONS = ('3.10', '3.11', '3.12')  # tola_lab.gpu_check.bundle.PYTHON_VERSIONS (parsed before it is imported)


def parse_pythons(value: str):
    """'3.12,3.10' -> ('3.10', '3.12'): CPython versions of ``PYTHONS``, oldest first."""
    names = [v.strip() for v in value.split(',') if v.strip()]
    unknown = [v for v in names if v not in PYTHONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f'--pythons: {", ".join(unknown) or "nothing"} is not a CPython version of '
                                         f'{", ".join(PYTHONS)}')
    return tuple(v for v in PYTHONS if v in names)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--checkout', action='store_true',
                        help='write the carry beside this checkout (dependency wheels and data, no package wheel)')
    parser.add_argument('--out', help='the folder (replaced; default build/gpu_carry with --checkout, else '
                        'build/gpu_bundle)')
    parser.add_argument('--wheel-cache',
                        help='folder of fetched and built wheels (default: the user cache, tola-plugin/gpu-wheels)')
    parser.add_argument(
        '--pythons', type=parse_pythons, default=PYTHONS,
        help=f'comma-separated CPython versions whose wheels tied to CPython\'s ABI (lmdb, rapidfuzz) travel '
        f'(default: {",".join(PYTHONS)}; the image\'s alone makes the carry smaller)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.gpu_check.bundle import build_bundle, build_carry
    if args.checkout:
        build_carry(args.out or 'build/gpu_carry', args.wheel_cache, pythons=args.pythons)
    else:
        build_bundle(args.out or 'build/gpu_bundle', args.wheel_cache, pythons=args.pythons)
    return 0


if __name__ == '__main__':
    run_command(main, parse_args)
