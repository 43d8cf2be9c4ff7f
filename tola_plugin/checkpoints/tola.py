"""TOLA's own weight files: adaptation checkpoints (LoRA + LRC with the settings they were trained with), merged
TOLA files (every tensor of a LoRA-merged TOLANet in one safetensors file, rebuild options in its metadata), and
building a trained TOLANet from an option file outside BasicSR's pipelines (tools).

``TOLANet.save_merged`` / ``from_merged`` / ``load_for_inference`` are the API of merged files; the file format
lives here (docs/tola.md, "Merged model").
"""
import json
from typing import Dict, Mapping, Optional

import torch
import yaml

from basicsr.archs import build_network
from basicsr.utils import get_root_logger
from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.utils.checkpoint_io import atomic_write, require_file, safe_torch_load, safetensors_metadata
from tola_plugin.utils.option_checks import OptionError, check_typed_block

ADAPTATION_META_KEY = 'tola_adaptation'  # the settings an adaptation checkpoint was trained with
MERGED_FORMAT = 'tola_plugin.tola_merged/1'  # metadata 'format' of a merged TOLA file
#: options of a merged file that fix its architecture (the tensors were written for them)
MERGED_ARCHITECTURE_OPTIONS = frozenset(
    {'idm_config', 'vae_config', 'mom_config', 'transocr_config', 'lrc', 'idm_lora', 'vae_lora'})


def check_adaptation_config(recorded: Dict, current: Dict, path: str, what: str) -> None:
    """Each recorded setting (``TOLANet.adaptation_config``) must equal the network's: a LoRA applied with another
    alpha, rank or placement, or an LRC of another size, would restore different images without any error."""
    differ = [key for key in sorted(set(recorded) | set(current)) if recorded.get(key) != current.get(key)]
    if differ:  # all of them at once: a rank change usually moves alpha too
        trained = ', '.join(f'{key} = {recorded.get(key)!r}' for key in differ)
        network = ', '.join(f'{key} = {current.get(key)!r}' for key in differ)
        raise ValueError(f'{what} {path!r} was trained with {trained}, but the network has {network} '
                         f'(network_g); set network_g to the settings of training')


def check_adaptation_shapes(state: Dict, net, path: str, what: str) -> None:
    """A tensor of another shape than the network's (e.g. another LoRA rank) is an error naming it."""
    own = net.adaptation_state_dict()
    for key, value in state.items():
        if key in own and tuple(value.shape) != tuple(own[key].shape):
            raise ValueError(f'{what} {path!r}: {key} has shape {tuple(value.shape)}, the network expects '
                             f'{tuple(own[key].shape)} (another lora_rank or LRC size than network_g)')


def load_adaptation_checkpoint(net, path: str, param_key: str = 'params',
                               what: str = 'TOLA adaptation checkpoint') -> None:
    """Load ``{param_key: adaptation state, 'tola_adaptation': settings}`` (``TOLAModel.save_network``'s file)
    into the TOLANet ``net``: the recorded settings must match the network's, every tensor's shape too, and
    no LoRA/LRC key may be missing or unexpected. ``what`` names the file (and its option) in errors."""
    state = safe_torch_load(
        require_file(path, what, 'Train one with python -m tola_plugin.train or point the '
                     'option at models/net_g_*.pth.'), what)
    if not isinstance(state, dict) or param_key not in state:
        found = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise KeyError(f'{path}: no {param_key!r} entry (found {found})')
    recorded = state.get(ADAPTATION_META_KEY)
    if recorded is None:
        get_root_logger().warning(f'{path} records no adaptation settings (written before tola-plugin recorded '
                                  'them): only its tensor shapes can be checked, not lora_alpha')
    else:
        check_adaptation_config(recorded, net.adaptation_config(), path, what)
    check_adaptation_shapes(state[param_key], net, path, what)
    net.load_adaptation_state_dict(state[param_key])


def read_tola_options(opt_path: str) -> Dict:
    """The option file ``opt_path`` (a dict), checked to hold a ``network_g`` of type TOLANet whose keys are all
    TOLANet options (errors name the file)."""
    with open(require_file(opt_path, 'option file', 'Give a TOLA option file.'), encoding='utf-8') as f:
        opt = yaml.safe_load(f)
    if not isinstance(opt, dict) or (opt.get('network_g') or {}).get('type') != 'TOLANet':
        raise ValueError(f'{opt_path}: network_g.type must be TOLANet')
    try:
        check_typed_block(opt['network_g'], ARCH_REGISTRY, 'network_g')
    except OptionError as err:
        raise OptionError(f'{opt_path}: {err}') from None
    return opt


def build_tola_from_options(opt_path: str, checkpoint: Optional[str] = None):
    """TOLANet of the option file's ``network_g`` with the adaptation state (LoRA + LRC) of ``checkpoint``
    (default: the file's ``path.pretrain_network_g``), in eval mode. A network with trainable adapters and
    no checkpoint is an error (exporting or running untrained adapters is almost certainly a mistake)."""
    opt = read_tola_options(opt_path)
    net = build_network(opt['network_g'])
    path_opt = opt.get('path') or {}
    checkpoint = checkpoint or path_opt.get('pretrain_network_g')
    if checkpoint:
        load_adaptation_checkpoint(net, checkpoint, path_opt.get('param_key_g', 'params'),
                                   what='TOLA adaptation checkpoint (path.pretrain_network_g or --checkpoint)')
    elif net.trainable_parameter_counts()['total']:
        raise ValueError(f'{opt_path}: no adaptation checkpoint (path.pretrain_network_g or --checkpoint) for a '
                         'network with LoRA/LRC')
    return net.eval()


# --------------------------------------------------------------------------------------------- merged files
def write_merged(path: str, state: Mapping[str, torch.Tensor], options: Dict) -> str:
    """Write a merged TOLA file atomically: every tensor of ``state`` (CPU, contiguous) in one pickle-free
    safetensors file, metadata ``format`` (MERGED_FORMAT) and ``options`` (the constructor options as JSON,
    ``TOLANet.merged_options``)."""
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


def read_merged_options(path: str, overrides: Dict) -> Dict:
    """The TOLANet constructor options stored in a merged file, updated with the inference switches ``overrides``
    (architecture options come from the file: overriding one is an error)."""
    opts = json.loads(read_merged_metadata(path)['options'])
    bad = sorted(set(overrides) & MERGED_ARCHITECTURE_OPTIONS)
    if bad:
        raise ValueError(f'TOLANet: {bad} are fixed by the merged file {path!r}')
    opts.update(overrides)
    return opts
