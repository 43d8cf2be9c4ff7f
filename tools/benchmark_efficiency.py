#!/usr/bin/env python
"""Parameters, MACs and batch-1 latency of TOLA and of the 200-step DiffTSR route (paper Table "efficiency").

Builds the TOLANet of an option file's ``network_g`` (the official checkpoints, or random weights with
``--random-weights``: counts and timings do not depend on the values), counts MACs with mmengine
(one multiply-add = 1 MAC; attention matmuls included) and times each component on batch-1 inputs.

Rows follow the paper's convention ("VAEs and text modules are excluded"):
  TOLA     params = IDM + IDM LoRA + LRC;   MACs = IDM with LoRA + LRC, once
  DiffTSR  params = IDM;                    MACs = 200 x IDM (the MoM text encoder, MoM U-Net and TDM excluded)
plus the full routes with the VAE and TransOCR. DiffTSR's latency is composed from measured components:
TransOCR + VAE encoder + steps x (MoM + IDM) + VAE decoder (the TDM is not implemented: the default
route never runs it).

Example:
    python tools/benchmark_efficiency.py -opt options/test/test_TOLA.yml --random-weights --repeats 3
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('-opt', required=True, help='option file with a TOLANet network_g')
    p.add_argument('--random-weights', action='store_true', help='build the backbone with random weights')
    p.add_argument('--height', type=int, default=128)
    p.add_argument('--width', type=int, default=512)
    p.add_argument('--steps', type=int, default=200, help='DiffTSR sampling steps (200)')
    p.add_argument('--repeats', type=int, default=3, help='timed runs per component (median; after a warm-up)')
    p.add_argument('--esrgan', action='store_true', help='add the ESRGAN x4 baseline row')
    p.add_argument('--device', default='auto', help="'auto' (CUDA if present), 'cpu', 'cuda:0', ...")
    p.add_argument('--out', help='write the results as JSON here (and a .md next to it)')
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error('--repeats must be at least 1')
    return args


def main(argv=None):
    args = parse_args(argv)
    from tola_lab.benchmarks.efficiency_benchmark import benchmark_efficiency
    return benchmark_efficiency(args.opt, args.random_weights, args.height, args.width, args.steps, args.repeats,
                                args.esrgan, args.device, args.out)


if __name__ == '__main__':
    run_command(main, parse_args)
