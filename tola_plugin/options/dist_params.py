"""The ``dist_params`` block of an option file (the process group of a torchrun or srun run): its keys, its backends
and its timeout. Read by the strict option check (``options/checks.py``) and by the BasicSR glue that starts the
group (``basicsr_glue/process_group.py``).

- ``backend``: nccl or gloo (left out: nccl on CUDA, gloo on the CPU; ``basicsr_glue/distributed.py``);
- ``port``: the master port of ``--launcher slurm``;
- ``timeout_minutes`` (60): rank 0 validates alone while the others wait at their next collective; NCCL's default
  watchdog (10 minutes) would kill a long validation.
"""
import datetime
from typing import Mapping, Optional

DEFAULT_TIMEOUT_MINUTES = 60
PROCESS_GROUP_BACKENDS = ('nccl', 'gloo')
DIST_PARAMS_KEYS = ('backend', 'port', 'timeout_minutes')


def process_group_timeout(dist_params: Optional[Mapping]) -> datetime.timedelta:
    """``dist_params.timeout_minutes`` (default 60) as the process group's timeout."""
    minutes = (dist_params or {}).get('timeout_minutes', DEFAULT_TIMEOUT_MINUTES)
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0:
        raise ValueError(f'dist_params.timeout_minutes: expected a positive number of minutes, got {minutes!r}')
    return datetime.timedelta(minutes=minutes)
