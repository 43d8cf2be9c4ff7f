"""Inference precision: 'fp32' | 'bf16' | 'fp16' | 'auto' -> the dtype a forward runs its matmuls and convolutions in.

Low precision runs through ``torch.autocast`` (weights stay fp32; the output is returned as fp32). On CUDA every
choice is native ('bf16' needs a GPU with bf16, Ampere or newer). On a CPU:

- 'auto' is decided by measurement where the CPU has bf16 instructions (AVX512-BF16 or AMX): bf16 where the route's
  dominant convolutions measured at least 1.3x faster in bf16 than in fp32 (``bf16_speed.py``: timed once, about a
  second, cached per CPU model and torch version), fp32 elsewhere. Flags alone do not tell: on an AVX512-BF16 Xeon
  without AMX bf16 ran at 0.55x the fp32 speed, on AMD EPYC (Zen 4 and 5, also without AMX) at about 2x. Without
  bf16 instructions bf16 is emulated and many times slower, and 'auto' is fp32 without measuring. 'auto' never
  picks fp16 on a CPU.
- an explicit 'bf16' on a CPU without bf16 instructions, or 'fp16' without AMX-FP16, runs with a warning that it
  will be slower than fp32.

So 'auto' is bf16 on CUDA (fp16 on GPUs without native bf16: before Ampere, e.g. T4, V100) and on CPUs where bf16
measured faster, fp32 on every other CPU. docs/inference.md lists the measured speed and deviation of each precision.

Safe at t = 999 (docs/training_gpus.md, "Precision"): TOLANet keeps Algorithm 1's arithmetic and the IDM's output
convolution in fp32 under autocast, and ``decoder_autocast`` runs the VAE decoder in fp32 when the precision is
fp16 (this VAE family overflows fp16). Training refuses fp16 (``check_training_precision``: no loss scaling).
"""
import contextlib
import warnings

import torch

from tola_plugin.archs import bf16_speed

PRECISIONS = ('fp32', 'bf16', 'fp16', 'auto')
_DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 instructions at all (AVX512-BF16 or AMX tiles); without them bf16 is emulated."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def cpu_has_amx_fp16() -> bool:
    """Whether this CPU has AMX-FP16, the unit that makes fp16 faster than fp32."""
    return bool(torch.cpu._is_amx_fp16_supported())


def cuda_has_native_bf16(device) -> bool:
    """Whether the GPU ``device`` ('cuda', 'cuda:1' or a torch.device; 'cuda' is the current one) computes bf16
    natively: compute capability 8.0 and newer (Ampere). Asked of that GPU, not of the current device as torch's
    ``is_bf16_supported`` does (a node of mixed GPUs); that one also counts emulation, slower than fp16 there."""
    if not torch.cuda.is_available():
        return False
    index = torch.device(device).index
    return torch.cuda.get_device_capability(torch.cuda.current_device() if index is None else index)[0] >= 8


def cpu_bf16_is_faster() -> bool:
    """Whether bf16 measured at least ``AUTO_BF16_MIN_SPEEDUP`` times faster than fp32 on this CPU (measured once,
    cached: ``bf16_speed.bf16_speedup``); False without bf16 instructions (emulated), without measuring."""
    if not cpu_has_native_bf16():
        return False
    return bf16_speed.bf16_speedup()['speedup'] >= bf16_speed.AUTO_BF16_MIN_SPEEDUP


def _slow_on_cpu(dtype: torch.dtype) -> str:
    """Why ``dtype`` is slower than fp32 on this CPU ('' when it need not be)."""
    if dtype == torch.bfloat16 and not cpu_has_native_bf16():
        return 'this CPU has no bf16 instructions (AVX512-BF16/AMX): bf16 is emulated, many times slower than fp32'
    if dtype == torch.float16 and not cpu_has_amx_fp16():
        return 'this CPU has no AMX-FP16: fp16 convolutions and matmuls are slower than fp32'
    return ''


def resolve_precision(precision: str, device) -> torch.dtype:
    """The compute dtype of ``precision`` on ``device`` (a torch.device or its name). 'auto' on a CPU with bf16
    instructions reads (or, once per machine, takes) the bf16 measurement. Warns (UserWarning) when an explicit
    low precision will be slower than fp32 on this hardware."""
    if precision not in PRECISIONS:
        raise ValueError(f'precision must be one of {PRECISIONS}, got {precision!r}')
    kind = torch.device(device).type
    if precision == 'auto':
        if kind == 'cuda':
            return torch.bfloat16 if cuda_has_native_bf16(device) else torch.float16
        return torch.bfloat16 if kind == 'cpu' and cpu_bf16_is_faster() else torch.float32
    dtype = _DTYPES[precision]
    if dtype == torch.float32:
        return dtype
    if kind == 'cpu':
        reason = _slow_on_cpu(dtype)
        if reason:
            warnings.warn(f'precision {precision!r}: {reason}; use fp32 or auto (docs/inference.md)', stacklevel=2)
    elif kind == 'cuda' and dtype == torch.bfloat16 and not cuda_has_native_bf16(device):
        warnings.warn("precision 'bf16': this GPU has no native bf16; use fp16 or auto", stacklevel=2)
    return dtype


def autocast(dtype: torch.dtype, device) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for a low-precision ``dtype``; a no-op context for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def full_precision(x: torch.Tensor) -> torch.Tensor:
    """``x`` in at least fp32 (bf16/fp16 -> fp32; fp32 and fp64 kept): for arithmetic that autocast must not round."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def decoder_autocast(dtype: torch.dtype, device) -> contextlib.AbstractContextManager:
    """The VAE decoder's context inside the forward's autocast: fp32 (autocast off) when ``dtype`` is fp16, since
    this VAE family overflows fp16 in its decoder (diffusers' ``force_upcast``); bf16 has fp32's range and stays."""
    if dtype == torch.float16:
        return torch.autocast(device_type=torch.device(device).type, enabled=False)
    return contextlib.nullcontext()


def check_training_precision(dtype: torch.dtype) -> None:
    """Training computes in fp32 or bf16: fp16 gradients underflow without loss scaling, which TOLA's training
    does not do."""
    if dtype == torch.float16:
        raise ValueError('network_g.precision: training in fp16 needs loss scaling, which TOLA does not do; use fp32 '
                         '(the paper) or bf16 (GPUs with native bf16: Ampere and newer). precision auto picks fp16 '
                         'on GPUs without bf16: set fp32 there')
