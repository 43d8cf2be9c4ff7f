#!/usr/bin/env python
"""CPU time per sample of the online degradation chains on the 128x512 canvas, per chain and scale.

The training loader must keep up with the model: at batch 16 and ~20 ms per sample a worker makes a
batch in ~0.3 s. Example:
    python tools/benchmark_degradation.py --samples 60
"""
import argparse
import time

import numpy as np

import tola_plugin  # noqa: F401
from tola_plugin.data.bsrgan_degradation import BSRGANDegradation
from tola_plugin.data.realesrgan_degradation import RealESRGANDegradation
from tola_plugin.data.sample_rng import sample_generator
from tola_plugin.data.text_render import TextLineRenderer
from tola_plugin.utils.cli_errors import run_tool


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--samples', type=int, default=30, help='samples per chain and scale')
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args(argv)
    rgb = TextLineRenderer(seed=args.seed).render(0)[0]
    img = rgb.astype(np.float32) / 255.0  # (128,512,3) RGB in [0,1], as the dataset feeds the chains
    print('| chain | scale | ms / sample |\n|---|---:|---:|')
    for chain in (RealESRGANDegradation(), BSRGANDegradation()):
        for scale in (1, 2, 4):
            start = time.perf_counter()
            for i in range(args.samples):
                chain(img, scale, sample_generator(args.seed, 0, i))
            ms = 1000 * (time.perf_counter() - start) / args.samples
            print(f'| {type(chain).__name__} | x{scale} | {ms:.1f} |')
    return 0


if __name__ == '__main__':
    run_tool(main)
