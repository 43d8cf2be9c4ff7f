"""The one device resolver of the package: a name ('cpu', 'cuda', 'cuda:1', ...) or None -> a torch.device; and how
many CUDA devices this machine has."""
from typing import Optional

import torch


def cuda_device_count() -> int:
    """CUDA devices present (0 without CUDA: ``device_count`` alone can report devices CUDA cannot initialise)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(name: Optional[str] = None) -> torch.device:
    """torch.device of ``name`` (None or 'auto': cuda when available, else cpu); a bad name, a device other than cpu
    and cuda, or CUDA without a GPU is a ValueError naming it."""
    auto = name is None or name == 'auto'
    try:
        device = torch.device(('cuda' if torch.cuda.is_available() else 'cpu') if auto else name)
    except RuntimeError as err:
        raise ValueError(f'device {name!r}: {err}') from None
    if device.type not in ('cpu', 'cuda'):  # meta holds no values, mps/xpu run none of the package's paths
        raise ValueError(f'device {name!r}: expected cpu, cuda or cuda:N (the devices the package runs on)')
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'device {name!r}: CUDA is not available on this machine (use cpu)')
    return device
