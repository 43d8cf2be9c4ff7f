"""TOLA's own weight files, as file formats (state dicts and settings in, state dicts and settings out; no network):

- adaptation checkpoints (``models/net_g_*.pth``, written by ``TOLAModel.save_network``): ``{param_key: the adaptation
  state (LoRA + LRC tensors), 'tola_adaptation': the settings it was trained with}``, a pickle-free torch file;
- merged files: every tensor of a LoRA-merged TOLANet in one safetensors file, the options that rebuild it as JSON
  in the metadata (``format`` MERGED_FORMAT; the options are ``TOLAConfig.recorded_options()``: the network's
  architecture and inference switches, read back with ``TOLAConfig.from_options``).

The network's side (what the state and the options are, loading them into a TOLANet) is
``tola_plugin.archs.tola_loading`` and ``tola_plugin.archs.tola_config``; docs/tola.md, "``TOLANet`` options"
(Files).
"""
import json
from typing import Dict, Mapping, Optional, Sequence, Tuple

import torch

from tola_plugin.checkpoints.demo_backbone import adaptation_file
from tola_plugin.utils.atomic_files import atomic_write
from tola_plugin.utils.checkpoint_io import atomic_torch_save, require_file, safe_torch_load, safetensors_metadata

ADAPTATION_META_KEY = 'tola_adaptation'  # the settings an adaptation checkpoint was trained with
MERGED_FORMAT = 'tola_plugin.tola_merged/1'  # metadata 'format' of a merged TOLA file


# ------------------------------------------------------------------------------------- adaptation checkpoints
def write_adaptation_checkpoint(path: str, state: Mapping[str, torch.Tensor], settings: Dict,
                                param_key: str = 'params') -> str:
    """Write ``{param_key: state (on the CPU), 'tola_adaptation': settings}`` atomically."""
    tensors = {k: v.detach().cpu() for k, v in state.items()}
    return atomic_torch_save({param_key: tensors, ADAPTATION_META_KEY: settings}, path)


def read_adaptation_checkpoint(
        path: str, param_key: str = 'params',
        what: str = 'TOLA adaptation checkpoint') -> Tuple[Dict[str, torch.Tensor], Optional[Dict]]:
    """(adaptation state, recorded settings or None for a file written before settings were recorded) of an
    adaptation checkpoint (a path, or ``demo``: the shipped demo adaptation), read weights-only. Errors name ``what``
    (the file and its option) and the path."""
    path = adaptation_file(path)
    state = safe_torch_load(
        require_file(path, what, 'Train one with python -m tola_plugin.train or point the '
                     'option at models/net_g_*.pth.'), what)
    if not isinstance(state, dict) or param_key not in state:
        found = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise KeyError(f'{path}: no {param_key!r} entry (found {found})')
    return state[param_key], state.get(ADAPTATION_META_KEY)


def check_adaptation_config(recorded: Dict, current: Dict, path: str, what: str) -> None:
    """Each recorded setting must equal the network's: a LoRA applied with another alpha, rank or placement, or an LRC
    of another size, would restore different images without any error."""
    differ = [key for key in sorted(set(recorded) | set(current)) if recorded.get(key) != current.get(key)]
    if differ:  # all of them at once: a rank change usually moves alpha too
        trained = ', '.join(f'{key} = {recorded.get(key)!r}' for key in differ)
        network = ', '.join(f'{key} = {current.get(key)!r}' for key in differ)
        raise ValueError(f'{what} {path!r} was trained with {trained}, but the network has {network} '
                         f'(network_g); set network_g to the settings of training')


def check_adaptation_shapes(state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], path: str,
                            what: str) -> None:
    """A tensor of another shape than the network's own (``expected``, e.g. another LoRA rank) is an error naming
    it; missing and unexpected keys are the strict load's to report."""
    for key, value in state.items():
        if key in expected and tuple(value.shape) != tuple(expected[key].shape):
            raise ValueError(f'{what} {path!r}: {key} has shape {tuple(value.shape)}, the network expects '
                             f'{tuple(expected[key].shape)} (another lora_rank or LRC size than network_g)')


# ------------------------------------------------------------------------------------------------ merged files
def write_merged(path: str, state: Mapping[str, torch.Tensor], options: Dict) -> str:
    """Write a merged TOLA file atomically: every tensor of ``state`` (CPU, contiguous) in one pickle-free
    safetensors file, metadata ``format`` (MERGED_FORMAT) and ``options`` (``TOLAConfig.recorded_options()``, as
    JSON)."""
    from safetensors.torch import save_file
    metadata = {'format': MERGED_FORMAT, 'options': json.dumps(options)}
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    return atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def read_merged_metadata(path: str) -> Dict[str, str]:
    """The metadata of a merged TOLA file (checked to be one: present, complete, of MERGED_FORMAT)."""
    require_file(path, 'merged TOLA model', 'Write one with tools/export_merged.py.')
    metadata = safetensors_metadata(path, 'merged TOLA model')
    if metadata.get('format') != MERGED_FORMAT:
        raise ValueError(f'{path!r} is not a merged TOLA model (metadata format {metadata.get("format")!r}, '
                         f'expected {MERGED_FORMAT!r})')
    return metadata


def read_merged(path: str, skip: Sequence[str] = ()) -> Tuple[Dict, Dict[str, torch.Tensor]]:
    """(options, tensors) of a merged TOLA file; the options a JSON object (``TOLAConfig.from_options`` checks its
    keys and values), the tensors memory-mapped (a tensor's bytes are read when first used), those whose names start
    with a prefix in ``skip`` left out. Missing or malformed options are a ValueError naming the file."""
    from safetensors.torch import load_file
    metadata = read_merged_metadata(path)
    if 'options' not in metadata:
        raise ValueError(f'{path}: merged TOLA model without the options that rebuild its network (metadata '
                         f'"options" missing); export it again with tools/export_merged.py')
    try:
        options = json.loads(metadata['options'])
    except ValueError as err:
        raise ValueError(f'{path}: metadata "options" is not JSON ({err}); export the model again with '
                         f'tools/export_merged.py') from None
    if not isinstance(options, dict):
        raise ValueError(f'{path}: metadata "options" must be a JSON object of TOLANet options, got '
                         f'{type(options).__name__}')
    state = load_file(path)
    skip = tuple(skip)
    return options, {k: v for k, v in state.items() if not (skip and k.startswith(skip))}


def check_merged_tensors(state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], path: str) -> None:
    """The tensors of a merged file against the network its options build (``expected``, e.g. on the meta device):
    the same names and shapes, floating point where the network's are (all of one precision) and the network's own
    dtype elsewhere; else a ValueError naming the file and the first tensors that differ."""
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise ValueError(f'{path}: its tensors do not match the network its options describe: {len(missing)} '
                         f'missing {missing[:3]}, {len(unexpected)} unexpected {unexpected[:3]}; the file is damaged '
                         f'or was not written by tools/export_merged.py')
    floats = {}  # dtype -> first tensor: a merged file holds one float precision (the network's, float32 or 64)
    for key, value in state.items():
        want = expected[key]
        kind_differs = value.dtype.is_floating_point != want.dtype.is_floating_point or (
            not want.dtype.is_floating_point and value.dtype != want.dtype)
        if tuple(value.shape) != tuple(want.shape) or kind_differs:
            raise ValueError(f'{path}: tensor {key} is {value.dtype} {tuple(value.shape)}, the network its options '
                             f'describe expects {want.dtype} {tuple(want.shape)}; the file is damaged or was not '
                             f'written by tools/export_merged.py')
        if value.dtype.is_floating_point:
            floats.setdefault(value.dtype, key)
    if len(floats) > 1:
        (first, one), (other, key) = sorted(floats.items(), key=lambda item: list(state).index(item[1]))[:2]
        raise ValueError(f'{path}: tensor {key} is {other}, but {one} is {first}: a merged file holds one precision; '
                         f'the file is damaged or was not written by tools/export_merged.py')
