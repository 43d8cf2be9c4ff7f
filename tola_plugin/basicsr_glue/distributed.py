"""How a training or test run uses devices and processes: every decision that depends on CUDA or on the
launcher, as a small function of its inputs (device counts, environment variables, options), so the tests run
each branch on a CPU with CUDA simulated. The patches of this package (``process_group``, ``ddp_wrapping``,
``option_parsing``, ``launchers``) wire them into BasicSR's pipeline.

- ``process_group_backend``: nccl when the model runs on CUDA (``num_gpu > 0``), gloo on the CPU, whatever the
  machine has (a CPU run on a GPU machine must not pick nccl: DDP of a CPU model on NCCL fails).
- ``local_cuda_device``: the GPU of a process; more processes on a node than GPUs is an error at start, not two
  ranks silently sharing a GPU (upstream's ``rank % device_count``) and a late, obscure NCCL failure; with gloo
  asked for (``dist_params.backend``), said and allowed: a test of multi-process training on fewer GPUs.
- ``slurm_environment``: BasicSR's ``--launcher slurm`` (srun): rank, world size, master address (first host of
  the allocation, ``scontrol``) and port, with the node-local task id as LOCAL_RANK (upstream's
  ``SLURM_PROCID % device_count`` divides by zero on a CPU and is wrong on nodes with several tasks).
- ``ddp_options``: ``broadcast_buffers`` only when training can change a buffer (``buffers_change``: never for
  TOLANet, whose buffers are all frozen: nothing to send at every step) and ``device_ids`` on CUDA only.
- ``check_data_parallel``: ``num_gpu > 1`` without a launcher means DataParallel, which copies every parameter to
  every GPU at every step; refused for networks with frozen parameters (TOLA's ~1.02 B), use torchrun.
- ``loader_batch_size``: the batch BasicSR's training loader really draws (``batch_size_per_gpu`` x ``num_gpu``
  in one process with several GPUs), which the exact-resume bookkeeping must count in.
- ``cuda_unusable_reason``: an NVIDIA driver is installed but this torch cannot use it (too old a driver for the
  wheel's CUDA build, or a CPU build of torch): ``num_gpu: auto`` would silently train on the CPU.
- ``end_failed_rank``: a rank whose run raised ends its process at once, with the error named, instead of destroying
  the process group, which under NCCL can wait on peers blocked in a collective until the timeout (60 minutes);
  torchrun then stops the other ranks.
"""
import inspect
import logging
import os
import subprocess
import sys
import traceback
from typing import Dict, Mapping, Optional

from tola_plugin.options.dist_params import PROCESS_GROUP_BACKENDS
from tola_plugin.utils.cli_errors import INPUT_ERRORS, USAGE_EXIT_STATUS, error_line
from tola_plugin.utils.procfs import nvidia_driver_version  # noqa: F401  (callers and tests use it from here)
from tola_plugin.utils.user_text import say


def process_group_backend(num_gpu: int, requested: Optional[str] = None) -> str:
    """'nccl' when the model runs on CUDA (``num_gpu > 0``), else 'gloo'; ``requested`` (``dist_params.backend``)
    overrides it, except nccl for a CPU model (NCCL moves CUDA tensors only)."""
    if requested is None:
        return 'nccl' if num_gpu > 0 else 'gloo'
    if requested not in PROCESS_GROUP_BACKENDS:
        raise ValueError(f'dist_params.backend: expected one of {PROCESS_GROUP_BACKENDS} or none, got {requested!r}')
    if requested == 'nccl' and num_gpu == 0:
        raise ValueError('dist_params.backend: nccl needs the model on CUDA, but num_gpu is 0 (this run trains on the '
                         'CPU): use gloo or leave dist_params.backend out (nccl on CUDA, gloo on the CPU)')
    return requested


def local_cuda_device(local_rank: int, device_count: int, local_world_size: Optional[int] = None,
                      shared: bool = False) -> int:
    """Index of the GPU of the process with node-local rank ``local_rank`` among the ``device_count`` it sees.

    ``local_world_size``: processes on this node when every process sees all of the node's GPUs (torchrun); None
    when it is not known (slurm), where a process that sees exactly one GPU has it to itself (srun
    ``--gpus-per-task=1`` binds one GPU per task). ``shared`` (gloo asked for in ``dist_params.backend``): more
    processes than GPUs take them in turn (rank % GPUs), to test multi-process training on fewer GPUs."""
    if device_count < 1:
        raise ValueError('num_gpu > 0 but this process sees no CUDA device')
    if shared:
        return local_rank % device_count
    if local_world_size is not None and local_world_size > device_count:
        raise ValueError(f'{local_world_size} processes on this node but only {device_count} CUDA device(s): two '
                         f'processes would share a GPU (NCCL refuses that, late and obscurely). Start at most '
                         f'{device_count} per node (torchrun --nproc_per_node={device_count}), set num_gpu: 0 '
                         'to train on the CPU, or dist_params.backend: gloo to share the GPUs (a test, not a speed-up)')
    if local_rank < device_count:
        return local_rank
    if device_count == 1 and local_world_size is None:
        return 0
    raise ValueError(f'node-local rank {local_rank} but only {device_count} CUDA device(s) on this node: start at '
                     f'most {device_count} processes per node (one per GPU)')


def first_slurm_host(nodelist: str) -> str:
    """The first host name of a slurm node list (``node[01-04]`` -> ``node01``), as BasicSR asks ``scontrol``."""
    try:
        proc = subprocess.run(['scontrol', 'show', 'hostnames', nodelist], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ValueError('--launcher slurm: scontrol is not on PATH (it names the first host of SLURM_NODELIST); '
                         'run under srun, or use torchrun (--launcher pytorch)') from None
    hosts = proc.stdout.split()
    if proc.returncode != 0 or not hosts:
        raise ValueError(f'--launcher slurm: scontrol show hostnames {nodelist!r} failed: '
                         f'{proc.stderr.strip() or "no host"}')
    return hosts[0]


def slurm_environment(environ: Mapping[str, str], port: Optional[int] = None) -> Dict[str, str]:
    """The variables ``init_process_group`` reads (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), from
    srun's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and SLURM_NODELIST. The port: ``dist_params.port``, else
    MASTER_PORT, else 29500 (BasicSR's order)."""
    missing = [k for k in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_LOCALID', 'SLURM_NODELIST') if k not in environ]
    if missing:
        raise ValueError(f'--launcher slurm: {", ".join(missing)} not set (start the launcher with srun)')
    return {
        'RANK': str(int(environ['SLURM_PROCID'])), 'WORLD_SIZE': str(int(environ['SLURM_NTASKS'])),
        'LOCAL_RANK': str(int(environ['SLURM_LOCALID'])), 'MASTER_ADDR': first_slurm_host(environ['SLURM_NODELIST']),
        'MASTER_PORT': str(port) if port is not None else environ.get('MASTER_PORT', '29500')
    }


def buffers_change(net) -> bool:
    """Whether training can change a buffer of ``net``: a module in training mode owns one (BatchNorm's running
    statistics). TOLANet keeps every module with buffers frozen in eval mode."""
    return any(m.training and next(m.buffers(recurse=False), None) is not None for m in net.modules())


def ddp_options(device_type: str, device_index: Optional[int], find_unused_parameters: bool,
                broadcast_buffers: bool) -> Dict:
    """Keyword arguments of DistributedDataParallel for a model on ``device_type`` (``broadcast_buffers``: whether
    rank 0's buffers are sent to every rank before each forward; only needed when training changes them). torch
    2.14 renamed the flag ``forward_sync_buffers`` (the old name warns); both skip the sync before forwards."""
    from torch.nn.parallel import DistributedDataParallel
    renamed = 'forward_sync_buffers' in inspect.signature(DistributedDataParallel.__init__).parameters
    options = {
        'forward_sync_buffers' if renamed else 'broadcast_buffers': bool(broadcast_buffers),
        'find_unused_parameters': bool(find_unused_parameters)
    }
    if device_type == 'cuda':
        options['device_ids'] = [device_index]
    return options


def check_data_parallel(net, num_gpu: int) -> None:
    """Refuse DataParallel (``num_gpu > 1`` in one process) for a network with frozen parameters."""
    if num_gpu <= 1:
        return
    frozen = sum(p.numel() for p in net.parameters() if not p.requires_grad)
    if frozen:
        raise ValueError(f'num_gpu: {num_gpu} in one process would use DataParallel, which copies all {frozen:,d} '
                         'frozen parameters to every GPU at every step: start one process per GPU with torchrun '
                         f'--nproc_per_node={num_gpu} -m tola_plugin.train -opt FILE --launcher pytorch (or set '
                         'num_gpu: 1)')


def loader_batch_size(opt: Mapping) -> int:
    """Samples per batch of BasicSR's training loader in this process (its ``build_dataloader``)."""
    per_gpu = int(opt['datasets']['train']['batch_size_per_gpu'])
    if opt.get('dist') or not opt.get('num_gpu'):
        return per_gpu
    return per_gpu * int(opt['num_gpu'])


def cuda_unusable_reason(cuda_available: bool, torch_cuda_build: Optional[str], driver: Optional[str]) -> str:
    """Why this torch cannot use the installed NVIDIA driver ('' when CUDA works or there is no driver)."""
    if cuda_available or driver is None:
        return ''
    if torch_cuda_build is None:
        return f'an NVIDIA driver ({driver}) is installed but this torch is a CPU-only build'
    return (f'an NVIDIA driver ({driver}) is installed but this torch, built for CUDA {torch_cuda_build}, cannot use '
            'it (a CUDA 13 build needs driver R580 or newer); update the driver or install the torch build for '
            'your CUDA (docs/training_gpus.md)')


def end_process_group() -> None:
    """Destroy the default process group if one was started (at the end of a run, also after an error)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def distributed_world() -> int:
    """Processes of the started default process group (1 when none is started)."""
    import torch.distributed as dist
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def end_failed_rank(err: BaseException) -> None:
    """End this rank of a distributed run now, after ``err`` (never returns): ``error: rank R of W failed: ...`` on
    stderr (with the traceback, but for bad input or options: the tools' convention, utils/cli_errors.py), the
    error recorded where torchrun reads it (``TORCHELASTIC_ERROR_FILE``: its summary names the root cause), logs
    flushed, then ``os._exit`` without destroying the process group. The other ranks may sit in a collective this
    rank never joins; torchrun (or srun) stops them when it sees this process end."""
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler
    where = f'rank {dist.get_rank()} of {dist.get_world_size()} failed'
    if not isinstance(err, INPUT_ERRORS) or os.environ.get('TOLA_TRACEBACK'):
        for line in ''.join(traceback.format_exception(type(err), err, err.__traceback__)).splitlines():
            say(line)
    say(f'error: {where}: {error_line(err)[len("error: "):]}')
    if os.environ.get('TORCHELASTIC_ERROR_FILE'):
        ErrorHandler().record_exception(err)
    logging.shutdown()
    sys.stdout.flush()
    os._exit(USAGE_EXIT_STATUS if isinstance(err, INPUT_ERRORS) else 1)
