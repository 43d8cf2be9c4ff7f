"""How many 128x512 windows one network call takes: as many as fit in a share of the memory free now on the device
(``auto_batch_size``), from an estimate of one window's working memory (``window_bytes``); docs/inference.md,
"Batches". Where the network runs is the runtime's decision (``tola_plugin/runtime``).
"""
import os

import torch

from tola_plugin.utils.procfs import meminfo_bytes

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
    available = meminfo_bytes('MemAvailable')
    return available if available is not None else int(os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE'))


def auto_batch_size(net, device: torch.device) -> int:
    """Windows per network call from a memory estimate: as many as fit in MEMORY_SHARE of the free memory
    (``window_bytes`` each), 1 to MAX_AUTO_BATCH."""
    fit = int(MEMORY_SHARE * free_memory(torch.device(device)) // max(1, window_bytes(net)))
    return max(1, min(MAX_AUTO_BATCH, fit))
