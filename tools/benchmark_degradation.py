#!/usr/bin/env python
"""CPU time per sample of the online degradation chains on the 128x512 canvas, per chain and scale.

The training loader must keep up with the model (the figures: docs/data.md, "Speed"). Example:
    python tools/benchmark_degradation.py --samples 60
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--samples', type=int, default=30, help='samples per chain and scale')
    p.add_argument('--seed', type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from tola_lab.benchmarks.degradation_benchmark import benchmark_degradation
    return benchmark_degradation(args.samples, args.seed)


if __name__ == '__main__':
    run_command(main, parse_args)
