"""The BasicSR glue's atomic saves: checkpoints (``BaseModel.save_network``) are written atomically (temporary file,
fsync, rename); a save that keeps failing is an error instead of upstream's "Just ignore it". Training states are saved
the same way (``save_with_retries``, by ``exact_resume.save_training_state``)."""
import os
import time

from basicsr.models.base_model import BaseModel
from basicsr.utils import get_root_logger
from basicsr.utils.dist_util import master_only

from tola_plugin.utils.checkpoint_io import atomic_torch_save


def save_with_retries(obj, path, what):
    """Atomic save, retried like upstream (3 attempts), but a failure in the end is raised, not ignored."""
    for attempt in range(3):
        try:
            return atomic_torch_save(obj, path)
        except OSError as err:
            if attempt == 2:
                raise OSError(f'could not save the {what} {path}: {err.strerror or err}') from err
            get_root_logger().warning(f'Save {what} error: {err}, remaining retry times: {2 - attempt}')
            time.sleep(1)


@master_only
def save_network(self, net, net_label, current_iter, param_key='params'):
    """Upstream's ``save_network`` (strip 'module.', one dict per param key), written atomically."""
    current_iter = 'latest' if current_iter == -1 else current_iter
    save_path = os.path.join(self.opt['path']['models'], f'{net_label}_{current_iter}.pth')
    nets = net if isinstance(net, list) else [net]
    param_keys = param_key if isinstance(param_key, list) else [param_key]
    if len(nets) != len(param_keys):
        raise ValueError('save_network: the lengths of net and param_key differ')
    save_dict = {}
    for net_, key in zip(nets, param_keys):
        state_dict = self.get_bare_model(net_).state_dict()
        save_dict[key] = {(k[7:] if k.startswith('module.') else k): v.cpu() for k, v in state_dict.items()}
    save_with_retries(save_dict, save_path, 'network')


def apply():
    BaseModel.save_network = save_network
