"""Times the route's dominant convolutions in fp32 and under bf16 (or fp16) autocast and prints the result as one JSON
line.

Run as a child process by ``bf16_speed.py`` (``python -P bf16_speed_probe.py [--precision bf16|fp16] [--shapes JSON]
[--rounds N]``), so that a kernel that crashes on this CPU ends this process, never the user's. Imports torch and the
package's precision names only (``archs/precision``: no network, a child that starts in about a second).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from tola_plugin.archs.precision import LOW_PRECISIONS, precision_dtype

#: (channels, height, width) of 3x3 convolutions that dominate a 128x512 restore (batch 1): the VAE decoder's levels
#: at 32x128, 64x256 and 128x512, and the IDM's at 16x64 and 4x16 (the last one weight-bound); 34 GMAC in all
SHAPES = ((512, 32, 128), (256, 64, 256), (128, 128, 512), (640, 16, 64), (1280, 4, 16))
ROUNDS = 3  # timed rounds (median) after a warm-up round
ABANDON = 4.0  # the low precision taking this many times the fp32 time in the warm-up: emulated, not measured further


def measure_speedup(precision: str = 'bf16', shapes=SHAPES, rounds: int = ROUNDS) -> dict:
    """Time one 3x3 convolution per shape of ``shapes`` (batch 1, fp32 weights) in fp32 and under ``precision``
    ('bf16' or 'fp16') autocast, interleaved, median of ``rounds`` after a warm-up. -> {'speedup': fp32 seconds /
    low-precision seconds (sum over the shapes), 'fp32_s', 'low_s', 'threads'}. Where the low precision turns out far
    slower (its kernels emulated, e.g. with oneDNN forced below the CPU's instructions) the warm-up stops once it has
    taken ``ABANDON`` times the fp32 time, and the speedup is the bound measured so far (the decision is fp32 either
    way). Non-finite low-precision outputs are reported ('finite': False)."""
    low = precision_dtype(precision)
    gen = torch.Generator().manual_seed(0)
    # cheapest first: an emulated bf16 is caught on a convolution of seconds, not minutes
    cases = [(torch.randn(1, c, h, w, generator=gen), torch.randn(c, c, 3, 3, generator=gen) * 0.02)
             for c, h, w in sorted(shapes, key=lambda s: s[0]**2 * s[1] * s[2])]
    seconds = {'fp32': [], 'low': []}
    warm_fp32, finite = None, True
    with torch.inference_mode():
        for round_index in range(rounds + 1):
            for name in ('fp32', 'low'):
                with torch.autocast('cpu', dtype=low, enabled=name == 'low'):
                    start = time.perf_counter()
                    for x, weight in cases:
                        y = F.conv2d(x, weight, padding=1)
                        if name == 'low' and round_index == 0:
                            finite = finite and bool(torch.isfinite(y).all())
                            if time.perf_counter() - start > ABANDON * warm_fp32:
                                elapsed = time.perf_counter() - start
                                return {
                                    'speedup': warm_fp32 / elapsed, 'fp32_s': warm_fp32, 'low_s': elapsed,
                                    'threads': torch.get_num_threads(), 'abandoned': True, 'finite': finite
                                }
                    elapsed = time.perf_counter() - start
                if round_index:
                    seconds[name].append(elapsed)
                elif name == 'fp32':
                    warm_fp32 = elapsed
    fp32, low_s = statistics.median(seconds['fp32']), statistics.median(seconds['low'])
    return {
        'speedup': fp32 / low_s, 'fp32_s': fp32, 'low_s': low_s, 'threads': torch.get_num_threads(), 'finite': finite
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--precision', choices=LOW_PRECISIONS, default='bf16')
    parser.add_argument('--shapes', type=json.loads, default=SHAPES, help='JSON list of [channels, height, width]')
    parser.add_argument('--rounds', type=int, default=ROUNDS)
    parser.add_argument('--threads', type=int, default=0, help='torch threads (0: torch default)')
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure_speedup(args.precision, [tuple(s) for s in args.shapes], args.rounds)
    sys.stdout.write(json.dumps(result) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
