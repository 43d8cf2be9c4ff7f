"""The strict state-dict check every loader of official weights goes through (DiffTSR, TransOCR, the demo backbone).

``nn.Module.load_state_dict(strict=True)`` names missing and unexpected keys but neither maps them back to the
checkpoint's own names nor materialises a module built on the meta device without a second copy; this does both.
"""
from typing import Mapping, Optional

import torch
from torch import nn


def load_state_dict_strict(module: nn.Module, state_dict: Mapping[str, torch.Tensor], component: str,
                           origin: Optional[Mapping[str, str]] = None) -> nn.Module:
    """Check ``state_dict`` against ``module`` key by key and shape by shape, then assign it; returns the
    module in eval mode.

    Any missing or unexpected key is a KeyError, a wrong shape a ValueError, a non-tensor a TypeError, each
    naming ``component`` and the key (with ``origin``, our key -> the checkpoint's own key, both are named).
    Tensors are assigned, not copied, so a module built on the meta device is materialised without a
    second allocation; values are cast to the module's dtype.
    """
    origin = origin or {}

    def name(k):
        return f'{origin[k]!r} (ours: {k!r})' if origin.get(k, k) != k else repr(k)

    own = module.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if missing or unexpected:
        raise KeyError(f'{component}: {len(missing)} missing key(s) {missing[:5]}, {len(unexpected)} unexpected '
                       f'key(s) {[name(k) for k in unexpected[:5]]}')
    tensors = {}
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f'{component}: key {name(key)} holds a {type(value).__name__}, expected a tensor')
        if tuple(value.shape) != tuple(own[key].shape):
            raise ValueError(f'{component}: key {name(key)} has shape {tuple(value.shape)}, '
                             f'expected {tuple(own[key].shape)}')
        tensors[key] = value if value.dtype == own[key].dtype else value.to(own[key].dtype)
    module.load_state_dict(tensors, strict=True, assign=True)
    left = [k for k, t in list(module.named_parameters()) + list(module.named_buffers()) if t.is_meta]
    if left:
        raise RuntimeError(f'{component}: tensors not covered by the checkpoint: {left[:5]}')
    return module.eval()
