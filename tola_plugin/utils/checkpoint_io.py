"""Safe, strict checkpoint reading shared by the official-layout loaders.

Nothing here downloads: a missing file is an error naming the file and where to get it.
"""
import os
from typing import Dict, Mapping

import torch
from torch import nn


def require_file(path: str, what: str, where: str) -> str:
    """Return ``path`` if it is a file, else raise FileNotFoundError saying what it is and where to get it."""
    if not path or not os.path.isfile(path):
        raise FileNotFoundError(f'{what} not found at {path!r}. {where}')
    return path


def safe_torch_load(path: str, what: str) -> Mapping:
    """``torch.load`` with ``weights_only=True`` (never runs pickled code) and clear errors."""
    try:
        return torch.load(path, map_location='cpu', weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        raise ValueError(f'{what} at {path!r} could not be read as a pickle-free torch checkpoint '
                         f'(truncated, corrupt, or carrying code): {type(err).__name__}: {err}') from err


def load_state_dict_strict(module: nn.Module, state_dict: Mapping[str, torch.Tensor], component: str) -> None:
    """Copy ``state_dict`` into ``module``; any missing, unexpected or mis-shaped key is a KeyError/ValueError
    naming ``component`` and the key."""
    own: Dict[str, torch.Tensor] = module.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if missing or unexpected:
        raise KeyError(f'{component}: {len(missing)} missing key(s) {missing[:5]}, '
                       f'{len(unexpected)} unexpected key(s) {unexpected[:5]}')
    for key, value in state_dict.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise ValueError(f'{component}: key {key!r} has shape {tuple(value.shape)}, '
                             f'expected {tuple(own[key].shape)}')
    module.load_state_dict(state_dict, strict=True)
