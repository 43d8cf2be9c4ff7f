"""Build a trained TOLANet outside BasicSR's pipelines (export and inference tools)."""
from typing import Optional

import yaml

from tola_plugin import _compat  # noqa: F401  (before basicsr)
from basicsr.archs import build_network

from tola_plugin.utils.checkpoint_io import require_file, safe_torch_load


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
        key = path_opt.get('param_key_g', 'params')
        state = safe_torch_load(require_file(checkpoint, 'TOLA adaptation checkpoint',
                                             'Train one with python -m tola_plugin.train.'),
                                'TOLA adaptation checkpoint')
        if key not in state:
            raise KeyError(f'{checkpoint}: no {key!r} entry (found {sorted(state)})')
        net.load_adaptation_state_dict(state[key])
    elif net.trainable_parameter_counts()['total']:
        raise ValueError(f'{opt_path}: no adaptation checkpoint (path.pretrain_network_g or --checkpoint) for a '
                         'network with LoRA/LRC')
    return net.eval()
