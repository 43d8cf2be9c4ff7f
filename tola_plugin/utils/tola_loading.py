"""Load TOLA adaptation checkpoints, and build a trained TOLANet outside BasicSR's pipelines (tools)."""
from typing import Optional

import yaml

from tola_plugin import _compat  # noqa: F401  (before basicsr)
from basicsr.archs import build_network

from tola_plugin.utils.checkpoint_io import require_file, safe_torch_load


def load_adaptation_checkpoint(net, path: str, param_key: str = 'params',
                               what: str = 'TOLA adaptation checkpoint') -> None:
    """Load ``{param_key: adaptation state}`` (``TOLAModel.save_network``'s file) into the TOLANet ``net``
    (strict: a missing or unexpected LoRA/LRC key raises). ``what`` names the file (and its option) in errors."""
    state = safe_torch_load(require_file(path, what, 'Train one with python -m tola_plugin.train or point the '
                                                     'option at models/net_g_*.pth.'), what)
    if param_key not in state:
        raise KeyError(f'{path}: no {param_key!r} entry (found {sorted(state)})')
    net.load_adaptation_state_dict(state[param_key])


def build_tola_from_options(opt_path: str, checkpoint: Optional[str] = None):
    """TOLANet of the option file's ``network_g`` with the adaptation state (LoRA + LRC) of ``checkpoint``
    (default: the file's ``path.pretrain_network_g``), in eval mode. A network with trainable adapters and
    no checkpoint is an error (exporting or running untrained adapters is almost certainly a mistake)."""
    with open(require_file(opt_path, 'option file', 'Give a TOLA option file.'), encoding='utf-8') as f:
        opt = yaml.safe_load(f)
    if (opt.get('network_g') or {}).get('type') != 'TOLANet':
        raise ValueError(f'{opt_path}: network_g.type must be TOLANet')
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
