"""The BasicSR glue's network loading: ``BaseModel.load_network`` reads weights-only (upstream's bare ``torch.load``
would run a pickled-code file)."""
from basicsr.models.base_model import BaseModel

from tola_plugin.utils.checkpoint_io import weights_only_loads

_original_load_network = BaseModel.load_network


def load_network(self, net, load_path, strict=True, param_key='params'):
    """Upstream's ``load_network`` with its ``torch.load`` made weights-only (a pickled-code file is refused)."""
    with weights_only_loads():
        return _original_load_network(self, net, load_path, strict, param_key)


def apply():
    BaseModel.load_network = load_network
