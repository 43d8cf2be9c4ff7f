"""Inference precision: 'fp32' | 'bf16' | 'fp16' | 'auto' -> the dtype a forward runs its matmuls and convolutions in.

Low precision runs through ``torch.autocast`` (weights stay fp32; the output is returned as fp32). On CUDA every
choice is native. On a CPU, bf16 is fast only with native bf16 instructions (AVX512-BF16 or AMX, detected at run
time); elsewhere it is emulated and many times slower than fp32, so 'auto' picks fp32 there and an explicit 'bf16'
or 'fp16' warns.
"""
import contextlib
import warnings

import torch

PRECISIONS = ('fp32', 'bf16', 'fp16', 'auto')
_DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}


def cpu_has_native_bf16() -> bool:
    """Whether this CPU executes bf16 natively (AVX512-BF16 or AMX tiles)."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def resolve_precision(precision: str, device) -> torch.dtype:
    """The compute dtype of ``precision`` on ``device`` (a torch.device or its name)."""
    if precision not in PRECISIONS:
        raise ValueError(f'precision must be one of {PRECISIONS}, got {precision!r}')
    kind = torch.device(device).type
    if precision == 'auto':
        if kind == 'cuda':
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if kind == 'cpu' and cpu_has_native_bf16() else torch.float32
    dtype = _DTYPES[precision]
    if kind == 'cpu' and dtype != torch.float32 and not cpu_has_native_bf16():
        warnings.warn(f'precision {precision!r} on a CPU without native bf16 (AVX512-BF16/AMX) is emulated and '
                      'much slower than fp32; use fp32 or auto', stacklevel=2)
    return dtype


def autocast(dtype: torch.dtype, device) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for a low-precision ``dtype``; a no-op context for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)
