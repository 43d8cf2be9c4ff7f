"""The BasicSR glue's process group: BasicSR's ``init_dist`` (``basicsr.utils.options``), which starts the process group
of a torchrun or srun run before the option file is read: ``rank % torch.cuda.device_count()`` (ZeroDivisionError on the
CPU, two ranks on one GPU when there are more ranks than GPUs), nccl always, no timeout.

Here the group starts once ``num_gpu`` and ``dist_params`` are known (``option_parsing`` defers upstream's call with
``launch_deferred`` and calls ``start_distributed`` after the checks): nccl for a CUDA model, gloo for a CPU one, one
GPU per process (checked), bound to it, with ``dist_params.timeout_minutes`` (decisions: ``distributed.py``).
"""
import contextlib
import os
from typing import Dict, Iterator

import torch
import torch.distributed as dist

import basicsr.utils.options

from tola_plugin.basicsr_glue import distributed
from tola_plugin.options.dist_params import process_group_timeout
from tola_plugin.utils.devices import cuda_device_count

_LAUNCH = {}  # inside launch_deferred: the launcher upstream's parse_options asked init_dist for


@contextlib.contextmanager
def launch_deferred() -> Iterator[Dict]:
    """Inside: a call of ``init_dist`` is recorded, not run; yields the record (``'launcher'`` once asked)."""
    _LAUNCH.clear()
    _LAUNCH['deferring'] = True
    try:
        yield _LAUNCH
    finally:
        _LAUNCH['deferring'] = False


def init_dist(launcher, backend=None, **kwargs):
    """Called by upstream's parse_options inside ``launch_deferred`` (every launcher, BasicSR's own too: ``launchers``),
    the request is recorded and the group started once the options are known; called by upstream's parse_options
    outside it (a script that imported it before the plugin), it starts the group now for the devices present
    (``kwargs``: slurm's ``dist_params``)."""
    if launcher not in ('pytorch', 'slurm'):
        raise ValueError(f'Invalid launcher type: {launcher}')
    if _LAUNCH.get('deferring'):
        _LAUNCH['launcher'] = launcher
        return
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
        index = distributed.local_cuda_device(
            int(os.environ.get('LOCAL_RANK', os.environ['RANK'])), torch.cuda.device_count(),
            None if local_world is None else int(local_world))
        torch.cuda.set_device(index)
        device = torch.device('cuda', index)
    dist.init_process_group(backend=backend, timeout=process_group_timeout(params),
                            device_id=device if backend == 'nccl' else None)


def apply():
    basicsr.utils.options.init_dist = init_dist  # parse_options calls the name imported into options
