"""What identifies this machine's kernels: the CPU model and flags, the GPU, the runtime versions and the environment
variables that force other kernels. The keys of the per-machine caches (bf16 speed, qualification verdicts)."""
import hashlib
import os
import platform
from importlib import metadata

import torch

from tola_plugin.utils.procfs import cpu_flags, cpuinfo

#: environment variables that make torch, MKL, oneDNN or OpenVINO run other kernels than the CPU's best
KERNEL_VARIABLES = ('ATEN_CPU_CAPABILITY', 'MKL_ENABLE_INSTRUCTIONS', 'ONEDNN_MAX_CPU_ISA', 'DNNL_MAX_CPU_ISA')


def cpu_model() -> str:
    """This CPU's model: /proc/cpuinfo's name with its family, model and stepping (one name can cover several
    generations: 'AMD EPYC' is the name of Zen 4 and Zen 5 virtual CPUs alike), else the platform's name."""
    fields = cpuinfo() or {}
    name = fields.get('model name') or platform.processor() or platform.machine() or 'unknown CPU'
    ids = [f'{k} {fields[k]}' for k in ('cpu family', 'model', 'stepping') if k in fields]
    return f'{name} ({", ".join(ids)})' if ids else name


def cpu_flags_digest() -> str:
    """12 hex digits of the CPU's flag list: a virtual machine can show one CPU model with other flags (AMX on or
    off), and the kernels follow the flags."""
    flags = ' '.join(sorted(cpu_flags()))
    return hashlib.sha256(flags.encode()).hexdigest()[:12]


def forced_kernels() -> str:
    """The kernel-forcing environment variables that are set ('' when none)."""
    return ' '.join(f'{k}={os.environ[k]}' for k in KERNEL_VARIABLES if os.environ.get(k))


def package_version(name: str) -> str:
    """The installed version of the distribution ``name`` without importing it ('' when not installed)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ''


def cpu_identity() -> str:
    """The CPU part of a cache key: model, flags, torch and its CPU capability, forced kernels."""
    forced = forced_kernels()
    return (f'{cpu_model()} flags {cpu_flags_digest()} | torch {torch.__version__} '
            f'{torch.backends.cpu.get_cpu_capability()}{" | " + forced if forced else ""}')


def device_identity(device: torch.device) -> str:
    """The cache key part of ``device``: the CPU's identity, or the GPU's name, compute capability, CUDA and
    driver-visible versions with torch's."""
    if device.type == 'cuda':
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        return (f'{props.name} sm_{props.major}{props.minor} | torch {torch.__version__} cuda {torch.version.cuda}'
                f'{" | " + forced_kernels() if forced_kernels() else ""}')
    return cpu_identity()
