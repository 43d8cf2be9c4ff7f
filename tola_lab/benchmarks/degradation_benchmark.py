"""CPU time per sample of the online degradation chains on the 128x512 canvas, per chain and scale
(tools/benchmark_degradation.py). The training loader must keep up with the model (the figures: docs/data.md,
"Speed").
"""
import time

import numpy as np

from tola_plugin.data.bsrgan_degradation import BSRGANDegradation
from tola_plugin.data.realesrgan_degradation import RealESRGANDegradation
from tola_plugin.data.sample_rng import sample_generator
from tola_plugin.data.text_render import TextLineRenderer


def benchmark_degradation(samples: int = 30, seed: int = 0) -> int:
    """Degrade one rendered line ``samples`` times with each chain (Real-ESRGAN, BSRGAN) at x1, x2, x4 and print a
    markdown table of milliseconds per sample, row by row as they are measured. -> 0."""
    rgb = TextLineRenderer(seed=seed).render(0)[0]
    img = rgb.astype(np.float32) / 255.0  # (128,512,3) RGB in [0,1], as the dataset feeds the chains
    print('| chain | scale | ms / sample |\n|---|---:|---:|')
    for chain in (RealESRGANDegradation(), BSRGANDegradation()):
        for scale in (1, 2, 4):
            start = time.perf_counter()
            for i in range(samples):
                chain(img, scale, sample_generator(seed, 0, i))
            ms = 1000 * (time.perf_counter() - start) / samples
            print(f'| {type(chain).__name__} | x{scale} | {ms:.1f} |')
    return 0
