"""The BasicSR glue's process group: BasicSR's ``init_dist`` (``basicsr.utils.options``), which starts the process group
of a torchrun or srun run before the option file is read: ``rank % torch.cuda.device_count()`` (ZeroDivisionError on the
CPU, two ranks on one GPU when there are more ranks than GPUs), nccl always, no timeout.

Here the group starts once ``num_gpu`` and ``dist_params`` are known (the launchers' ``option_parsing`` reads the
options itself and calls ``start_distributed`` after the checks): nccl for a CUDA model, gloo for a CPU one, one GPU
per process (checked; processes may share one where gloo is asked for), bound to it, with
``dist_params.timeout_minutes`` (decisions: ``distributed.py``).
"""
import os

import torch
import torch.distributed as dist

import basicsr.utils.options

from tola_plugin.basicsr_glue import distributed
from tola_plugin.options.dist_params import process_group_timeout
from tola_plugin.utils.devices import cuda_device_count
from tola_plugin.utils.user_text import say


def init_dist(launcher, backend=None, **kwargs):
    """Called by upstream's own parse_options (a script that imported it before the plugin; every launcher gets the
    plugin's, ``launchers``), before the options are read: the group starts now, for the devices present
    (``kwargs``: slurm's ``dist_params``)."""
    if launcher not in ('pytorch', 'slurm'):
        raise ValueError(f'Invalid launcher type: {launcher}')
    start_distributed({'num_gpu': cuda_device_count(), 'dist_params': kwargs}, launcher)


def start_distributed(opt, launcher):
    """The process group of a torchrun (``pytorch``) or srun (``slurm``) run (``distributed.py``): nccl for a
    CUDA model, gloo for a CPU one (``dist_params.backend`` may say), one GPU per process (checked), bound to it
    (``device_id``), with ``dist_params.timeout_minutes``."""
    import torch.multiprocessing as mp
    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method('spawn')
    params = opt.get('dist_params') or {}
    backend = distributed.process_group_backend(opt['num_gpu'], params.get('backend'))
    if launcher == 'slurm':
        os.environ.update(distributed.slurm_environment(os.environ, params.get('port')))
    device = None
    if opt['num_gpu'] > 0:
        local_world = os.environ.get('LOCAL_WORLD_SIZE') if launcher == 'pytorch' else None
        local_rank, count = int(os.environ.get('LOCAL_RANK', os.environ['RANK'])), torch.cuda.device_count()
        shared = params.get('backend') == 'gloo'  # asked for: gloo lets processes share a GPU, NCCL does not
        index = distributed.local_cuda_device(local_rank, count, None if local_world is None else int(local_world),
                                              shared)
        if shared and local_rank == 0 and local_world is not None and int(local_world) > count:
            say(f'warning: dist_params.backend gloo: {local_world} processes share {count} CUDA device(s), rank % '
                f'{count}: a test of multi-process training, not a speed-up')
        torch.cuda.set_device(index)
        device = torch.device('cuda', index)
    dist.init_process_group(backend=backend, timeout=process_group_timeout(params),
                            device_id=device if backend == 'nccl' else None)


def apply():
    basicsr.utils.options.init_dist = init_dist  # parse_options calls the name imported into options
