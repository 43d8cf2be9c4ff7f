"""Strict loading of the official TransOCR checkpoint (``transocr.pth`` of the DiffTSR release).

Layouts accepted (docs/transocr.md, "The official TransOCR"; DiffTSR's ``Text_Prediction.__init__``):
- ``{'state_dict': {key: tensor}}`` with the bare model's keys;
- a DataParallel state dict, keys prefixed ``module.`` (``module.module.`` is first rewritten to ``module.``,
  as the official loader does);
- a bare state dict (what ``TransOCR().state_dict()`` saves);
- our safetensors file (``save_transocr``, e.g. the demo backbone's): the state dict plus the architecture
  (``TransOCR.arch_options``) in its metadata, which ``archs.backbone_builder.load_transocr`` uses unless options
  are given.
The file is read with ``weights_only=True`` (never runs pickled code); any missing, unexpected or
mis-shaped key is an error naming the key. Nothing is downloaded.
"""
import json
from typing import Dict, Mapping, Tuple

import torch

from tola_plugin.utils.checkpoint_io import open_safetensors, require_file, safe_torch_load

COMPONENT = 'TransOCR (transocr.pth)'
WHERE = ('The DiffTSR release (YuzheZhang-1999/DiffTSR README, Google Drive / Baidu links) publishes transocr.pth '
         'next to DiffTSR.ckpt; download it and place it at e.g. checkpoints/transocr.pth, then point the option '
         'to it.')


def transocr_state_dict(raw: Mapping, path: str = '<in memory>') -> Dict[str, torch.Tensor]:
    """Official-layout object (see module docstring) -> bare TransOCR state dict. ValueError for other layouts."""
    if not isinstance(raw, Mapping):
        raise ValueError(f'{COMPONENT} at {path!r}: expected a dict of tensors, got {type(raw).__name__}')
    # The official loader rewrites the top-level keys only, before looking for 'state_dict'.
    raw = {str(k).replace('module.module.', 'module.'): v for k, v in raw.items()}
    state = raw['state_dict'] if 'state_dict' in raw else raw
    if not isinstance(state, Mapping) or not state:
        raise ValueError(f'{COMPONENT} at {path!r}: the state dict is empty or not a dict')
    prefixed = [k.startswith('module.') for k in state]
    if any(prefixed) and not all(prefixed):
        mixed = [k for k in state if not k.startswith('module.')][:3]
        raise KeyError(f'{COMPONENT} at {path!r}: some keys carry the DataParallel prefix "module." and some do not, '
                       f'e.g. {mixed}')
    out = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f'{COMPONENT} at {path!r}: entry {key!r} is a {type(value).__name__}, not a tensor')
        out[key[len('module.'):] if all(prefixed) else key] = value
    return out


SAFETENSORS_FORMAT = 'tola_plugin.transocr/1'


def save_transocr(model, path: str, metadata: Mapping[str, str] = None) -> None:
    """Write a TransOCR ``model``'s state dict and architecture (``arch_options``) to a safetensors file."""
    from safetensors.torch import save_file
    meta = {'format': SAFETENSORS_FORMAT, 'arch_options': json.dumps(model.arch_options), **dict(metadata or {})}
    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}, path, metadata=meta)


def read_transocr_safetensors(path: str):
    """(state dict, architecture options) of a ``save_transocr`` file."""
    with open_safetensors(path, COMPONENT, SAFETENSORS_FORMAT, 'save_transocr') as (f, meta):
        return {k: f.get_tensor(k) for k in f.keys()}, json.loads(meta['arch_options'])


def read_transocr(path: str) -> Tuple[Dict[str, torch.Tensor], Dict]:
    """(state dict in the bare model's keys, stored architecture options or {}) of any accepted layout.

    Raises FileNotFoundError (missing file, says where the release publishes it) or ValueError (unreadable,
    truncated, pickle with code, non-tensor entries).
    """
    require_file(path, f'{COMPONENT} checkpoint', WHERE)
    if path.endswith('.safetensors'):
        return read_transocr_safetensors(path)
    return transocr_state_dict(safe_torch_load(path, f'{COMPONENT} checkpoint'), path), {}
