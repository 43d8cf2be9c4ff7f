"""The BasicSR glue's DDP wrapping: ``BaseModel.model_to_device``. Upstream passes
``device_ids=[torch.cuda.current_device()]`` to DDP (fails on the CPU), broadcasts every buffer at every step and
silently falls back to DataParallel without a launcher. Here DDP gets ``device_ids`` on CUDA only and broadcasts buffers
only when training can change one; DataParallel is refused for networks with frozen parameters (decisions:
``distributed.py``)."""
import torch
from torch.nn.parallel import DataParallel, DistributedDataParallel

from basicsr.models.base_model import BaseModel

from tola_plugin.basicsr_glue import distributed


def model_to_device(self, net):
    """``net`` on the model's device, in DDP under a launcher, in DataParallel for ``num_gpu > 1`` (when allowed)."""
    net = net.to(self.device)
    if self.opt['dist']:
        index = torch.cuda.current_device() if self.device.type == 'cuda' else None
        net = DistributedDataParallel(
            net,
            **distributed.ddp_options(self.device.type, index, self.opt.get('find_unused_parameters', False),
                                      distributed.buffers_change(net)))
    elif self.opt['num_gpu'] > 1:
        distributed.check_data_parallel(net, self.opt['num_gpu'])
        net = DataParallel(net)
    return net


def apply():
    BaseModel.model_to_device = model_to_device
