"""The machine a benchmark ran on, its own matmul ceiling in fp32 and bf16 (the yardstick of every route's share)
and its memory copy bandwidth (the yardstick of a stage that moves more bytes than it computes)."""
import contextlib
import os
import platform
import statistics
import time
from typing import Dict

import torch

from tola_plugin.archs.precision import cpu_has_native_bf16
from tola_plugin.runtime.machine import package_version
from tola_plugin.utils.procfs import cpuinfo


def matmul_ceiling(size: int = 2048, repeats: int = 5, min_seconds: float = 0.2) -> Dict[str, float]:
    """This machine's torch matmul rate (GFLOP/s, 2 per multiply-add) of a square product in fp32 and in bf16,
    median of ``repeats`` after a warm-up. The size doubles from 256 up to ``size`` while one product takes less
    than ``min_seconds``: where bf16 is emulated (or the kernels are forced below it) a 2048 product would take
    minutes, and a smaller one measures the same rate."""
    rates = {}
    for name, dtype in (('fp32', torch.float32), ('bf16', torch.bfloat16)):
        n = 256
        while True:
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            start = time.perf_counter()
            torch.mm(a, b)  # warm-up, and the size probe
            if n >= size or time.perf_counter() - start >= min_seconds:
                break
            n *= 2
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        rates[name] = 2 * n**3 / statistics.median(times) / 1e9
    return rates


def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """This machine's memory bandwidth (GB/s, bytes read plus bytes written) of a torch copy of a ``megabytes`` fp32
    tensor (far larger than the caches), median of ``repeats`` after a warm-up."""
    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: the pages of both are touched before timing
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * src.element_size() / statistics.median(times) / 1e9


def machine() -> Dict:
    info = {
        'platform': platform.platform(), 'python': platform.python_version(), 'torch': torch.__version__,
        'cpu_capability': torch.backends.cpu.get_cpu_capability(), 'threads': torch.get_num_threads(),
        'cpu_count': os.cpu_count(), 'native_bf16': cpu_has_native_bf16()
    }
    if package_version('openvino'):
        info['openvino'] = package_version('openvino')
    fields = cpuinfo()
    if fields is not None:
        info['cpu'] = fields.get('model name') or platform.processor()
    with contextlib.suppress(OSError):
        info['load_average'] = os.getloadavg()
    return info
