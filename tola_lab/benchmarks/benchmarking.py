"""Helpers shared by the benchmark tools (tools/benchmark_efficiency.py, tools/benchmark_inference.py)."""
import statistics
import time
from typing import Callable, Optional

import torch

from basicsr.archs import build_network

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.archs.tola_loading import read_tola_options


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` runs after one warm-up run (CUDA synchronised)."""
    with torch.no_grad():
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def build_benchmark_tola(opt_path: str, random_weights: bool, adaptation: bool = False,
                         checkpoint: Optional[str] = None, seed: int = 0):
    """The TOLANet of an option file's ``network_g``, in eval mode, for measuring.

    random_weights: the backbone is built at its configured (full) size with random weights (seed ``seed``):
        counts and timings do not depend on the values; otherwise the option file's checkpoints are loaded.
    adaptation: also give LoRA and the LRC their trained values: the adaptation checkpoint (``checkpoint`` or
        the file's ``path.pretrain_network_g``), or with ``random_weights`` seeded random values (at init LoRA
        and the LRC add exact zeros, which would hide what merging changes). False: left at init.
    """
    if adaptation and not random_weights:
        return TOLANet.from_options(opt_path, checkpoint)
    opt = read_tola_options(opt_path)
    net_opt = dict(opt['network_g'])
    if random_weights:
        net_opt.update(backbone_init='random', random_seed=seed)
    net = build_network(net_opt).eval()
    if adaptation:
        gen = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for param in net.parameters():
                if param.requires_grad:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.01)
    return net
