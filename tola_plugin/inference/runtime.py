"""Where and how an inference network runs: device, backend, precision and CUDA's TF32, decided in one place for
``tola-infer``, ``tola-web`` and ``TOLAPipeline`` used as a library (``place_network``).

- device: the given one ('cpu', 'cuda', 'cuda:1', ...), else CUDA when available, else the CPU.
- backend: 'auto' (default) runs the IDM and the VAE on OpenVINO on a CPU when ``openvino`` is installed
  (``inference/openvino_backend.py``; the measured fastest CPU runtime, docs/inference.md "Backends"), else torch,
  with a one-line notice when OpenVINO is missing; on a GPU always torch. 'openvino' insists (an error where it
  cannot run), 'torch' never uses it.
- precision: the network's own switch (``TOLANet.set_switches(precision=...)``; 'auto' resolves per device:
  ``archs/precision.py``); on OpenVINO the stages for it are compiled here, the others on first use.
- TF32: CUDA's fp32 convolutions and matmuls stay IEEE fp32 unless ``allow_tf32`` (as the launchers' option
  ``allow_tf32: false``; docs/training_gpus.md), so a GPU restore computes what a CPU restore computes.
"""
import os
import sys
from typing import Optional

import torch

from tola_plugin.archs.precision import resolve_precision
from tola_plugin.inference import openvino_backend
from tola_plugin.utils.cuda_math import set_tf32
from tola_plugin.utils.devices import resolve_device

BACKENDS = ('auto', 'openvino', 'torch')


def resolve_backend(backend: str, device: torch.device) -> str:
    """'openvino' or 'torch' for ``backend`` (one of BACKENDS) on ``device``; 'auto' without OpenVINO on a CPU says
    so in one line (stderr); an explicit 'openvino' that cannot run is a ValueError naming the fix."""
    if backend not in BACKENDS:
        raise ValueError(f'backend must be one of {BACKENDS}, got {backend!r}')
    if backend == 'torch':
        return 'torch'
    if device.type != 'cpu':
        if backend == 'openvino':
            raise ValueError(f'backend openvino runs on the CPU, the device is {device} (use backend torch or auto)')
        return 'torch'
    missing = openvino_backend.openvino_missing()
    if missing:
        if backend == 'openvino':
            raise ValueError(f'backend openvino: {missing}')
        print(
            f'tola-plugin: note: running the IDM and VAE on torch: {missing} (about 2x faster on the CPU; '
            'docs/inference.md)', file=sys.stderr, flush=True)
        return 'torch'
    return 'openvino'


def place_network(net, device=None, backend: str = 'auto', allow_tf32: bool = False, source: Optional[str] = None):
    """Run the inference TOLANet ``net`` on ``device`` with ``backend`` (module docstring), in place; returns (net,
    device, backend as resolved). ``source``: the merged file ``net`` was loaded from (the OpenVINO cache key; None:
    a hash of the tensors)."""
    device = resolve_device(None if device is None else str(device))
    chosen = resolve_backend(backend, device)
    if device.type == 'cuda':
        set_tf32(allow_tf32)
    net.to(device)
    if chosen == 'openvino':
        openvino_backend.use_openvino(net, source, dtypes=(resolve_precision(net.precision, device), ))
    return net, device, chosen


#: bytes of working memory one 128x512 window needs, per byte of a full-resolution VAE decoder activation
#: (block_out_channels[0] x 128 x 512 fp32): the decoder's last level holds about this many such tensors at once
#: (measured at full size, docs/inference.md "Memory": +0.55 GiB per window, 128 channels)
WINDOW_ACTIVATIONS = 16
MAX_AUTO_BATCH = 8  # beyond it a CPU gains nothing measurable (docs/inference.md, "Batches")
MEMORY_SHARE = 0.5  # of the memory free now: the rest stays for the system and other programs

FULL_SIZE_CHANNELS = 128  # block_out_channels[0] of DiffTSR's VAE: assumed for a network that has no such VAE


def window_bytes(net, height: int = 128, width: int = 512) -> int:
    """Estimated working memory of one (height, width) window in ``net``'s forward (bytes); a network without a
    diffusers VAE (any module with TOLANet's inference contract) is assumed full size."""
    config = getattr(getattr(net, 'vae', None), 'config', None)
    channels = int(getattr(config, 'block_out_channels', (FULL_SIZE_CHANNELS, ))[0])
    return WINDOW_ACTIVATIONS * channels * height * width * 4


def free_memory(device: torch.device) -> int:
    """Bytes free now on ``device``: the GPU's (``torch.cuda.mem_get_info``) or the machine's available memory."""
    if device.type == 'cuda':
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open('/proc/meminfo', encoding='ascii') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE'))  # no /proc: free pages


def auto_batch_size(net, device: torch.device) -> int:
    """Windows per network call from a memory estimate: as many as fit in MEMORY_SHARE of the free memory
    (``window_bytes`` each), 1 to MAX_AUTO_BATCH."""
    fit = int(MEMORY_SHARE * free_memory(torch.device(device)) // max(1, window_bytes(net)))
    return max(1, min(MAX_AUTO_BATCH, fit))
