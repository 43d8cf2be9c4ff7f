"""Precision: 'fp32' | 'bf16' | 'fp16' | 'auto' -> the dtype each stage of a forward runs its matmuls and
convolutions in (``STAGE_NAMES``: the VAE encoder, the MoM text encoder, the IDM, the LRC, the VAE decoder; the
TransOCR text prior always runs in fp32).

Low precision runs through ``torch.autocast`` per stage (weights stay fp32; each stage's output is returned as fp32).
An explicit 'bf16' or 'fp16' is the user's choice and runs as asked on every stage (``stage_dtypes``; under fp16 the
VAE decoder runs in fp32: this VAE family overflows fp16), with a warning where it will be slower than fp32 (bf16
without the CPU's bf16 instructions, fp16 without fp16 ones, bf16 on a GPU without native bf16). 'auto' is the runtime
decision's to make (``tola_plugin/runtime``): the inference entry points choose a precision per stage among the fast
ones that keep the one-step latent and the image within the qualification's bounds on this machine; a network run
without that decision (training, BasicSR's validation, a TOLANet called directly) computes 'auto' in fp32. So 'auto'
never runs an unproven fast path. docs/inference.md, "Precision". Once decided, a precision is one typed value,
``StageDtypes`` (a dtype per stage), from the runtime's plan to the stage runner the network computes with
(``stage_runner.py``) and the OpenVINO worker's compile request.

Safe at t = 999 (docs/training_gpus.md, "Precision"): TOLANet keeps Algorithm 1's arithmetic and the IDM's output
convolution in fp32 under autocast. Training refuses fp16 (``check_training_precision``: no loss scaling).
"""
import contextlib
import warnings
from collections.abc import Mapping
from typing import Dict, Iterator

import torch

from tola_plugin.archs.stages import PLANNED
from tola_plugin.utils.procfs import cpu_flags

PRECISIONS = ('fp32', 'bf16', 'fp16', 'auto')
LOW_PRECISIONS = ('bf16', 'fp16')  # the fast precisions, each measured and judged against fp32
_DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}
STAGE_NAMES = PLANNED  # the stages whose compute dtype a precision sets (``archs/stages.py``), in the forward's order


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 instructions at all (AVX512-BF16 or AMX tiles); without them bf16 is emulated."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def cpu_has_fp16_instructions() -> bool:
    """Whether this CPU computes fp16 in hardware (AVX512-FP16 or AMX-FP16, by its flags or torch's check); without
    them fp16 is emulated, slower than fp32. The one answer for the warning here and the runtime's plan."""
    return bool({'avx512_fp16', 'amx_fp16'} & cpu_flags() or torch.cpu._is_amx_fp16_supported())


def cuda_has_native_bf16(device) -> bool:
    """Whether the GPU ``device`` ('cuda', 'cuda:1' or a torch.device; 'cuda' is the current one) computes bf16
    natively: compute capability 8.0 and newer (Ampere). Asked of that GPU, not of the current device as torch's
    ``is_bf16_supported`` does (a node of mixed GPUs); that one also counts emulation, slower than fp16 there."""
    if not torch.cuda.is_available():
        return False
    index = torch.device(device).index
    return torch.cuda.get_device_capability(torch.cuda.current_device() if index is None else index)[0] >= 8


def cuda_has_fp16_tensor_cores(device) -> bool:
    """Whether the GPU ``device`` has fp16 tensor cores (compute capability 7.0 and newer: Volta, Turing, ...),
    which make fp16 several times faster than fp32 there."""
    if not torch.cuda.is_available():
        return False
    index = torch.device(device).index
    return torch.cuda.get_device_capability(torch.cuda.current_device() if index is None else index)[0] >= 7


def _slow_on_cpu(dtype: torch.dtype) -> str:
    """Why ``dtype`` is slower than fp32 on this CPU ('' when it need not be)."""
    if dtype == torch.bfloat16 and not cpu_has_native_bf16():
        return 'this CPU has no bf16 instructions (AVX512-BF16/AMX): bf16 is emulated, many times slower than fp32'
    if dtype == torch.float16 and not cpu_has_fp16_instructions():
        return 'this CPU has no fp16 instructions (AVX512-FP16/AMX-FP16): fp16 is emulated, slower than fp32'
    return ''


def precision_dtype(precision: str) -> torch.dtype:
    """The dtype of an explicit precision ('fp32', 'bf16', 'fp16'); 'auto' is not a dtype (``requested_dtype``)."""
    if precision not in _DTYPES:
        raise ValueError(f'precision must be one of {tuple(_DTYPES)}, got {precision!r}')
    return _DTYPES[precision]


def requested_dtype(precision: str, device) -> torch.dtype:
    """The compute dtype of ``precision`` on ``device`` (a torch.device or its name) where no runtime decision was
    made: an explicit choice as asked, 'auto' as fp32 (module docstring). Warns (UserWarning) when an explicit low
    precision will be slower than fp32 on this hardware."""
    if precision not in PRECISIONS:
        raise ValueError(f'precision must be one of {PRECISIONS}, got {precision!r}')
    if precision in ('auto', 'fp32'):
        return torch.float32
    dtype = _DTYPES[precision]
    kind = torch.device(device).type
    if kind == 'cpu':
        reason = _slow_on_cpu(dtype)
        if reason:
            warnings.warn(f'precision {precision!r}: {reason}; use fp32 or auto (docs/inference.md)', stacklevel=2)
    elif kind == 'cuda' and dtype == torch.bfloat16 and not cuda_has_native_bf16(device):
        warnings.warn("precision 'bf16': this GPU has no native bf16; use fp16 or auto", stacklevel=2)
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    """'fp32', 'bf16' or 'fp16' of a compute dtype."""
    return {v: k for k, v in _DTYPES.items()}[dtype]


def autocast(dtype: torch.dtype, device) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for a low-precision ``dtype``; a no-op context for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def full_precision(x: torch.Tensor) -> torch.Tensor:
    """``x`` in at least fp32 (bf16/fp16 -> fp32; fp32 and fp64 kept): for arithmetic that autocast must not round."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def stage_dtypes(dtype: torch.dtype, training: bool = False) -> Dict[str, torch.dtype]:
    """Stage (``STAGE_NAMES``) -> compute dtype of one precision on every stage: ``dtype`` everywhere, except the
    VAE decoder in fp32 under fp16 (this VAE family overflows fp16 in its decoder: diffusers' ``force_upcast``; bf16
    has fp32's range) and, in ``training``, the IDM in fp32 under bf16: its ε̂ error reaches ẑ0, and the gradient to
    LoRA and the LRC through ẑ0, x 101.6 at t = 999, and the route trained must be one that serves (an IDM in bf16
    never qualifies; docs/training_gpus.md, "Precision")."""
    return {
        stage: torch.float32 if (stage == 'vae_decoder' and dtype == torch.float16) or
        (training and stage == 'idm' and dtype == torch.bfloat16) else dtype
        for stage in STAGE_NAMES
    }


class StageDtypes(Mapping):
    """The compute dtype of each stage (``STAGE_NAMES`` -> torch.dtype): the one typed form a precision takes once it
    is decided (the runtime's plan, the stage runner a network runs with, the OpenVINO worker's compile request).
    Immutable and hashable; equal to any mapping with the same items (``{'vae_encoder': torch.bfloat16, ...}``)."""
    __slots__ = ('_dtypes', )

    def __init__(self, dtypes: Mapping):
        if set(dtypes) != set(STAGE_NAMES):
            raise ValueError(f'a precision per stage needs exactly the stages {STAGE_NAMES}, got {sorted(dtypes)}')
        self._dtypes = tuple(dtypes[stage] for stage in STAGE_NAMES)

    @classmethod
    def uniform(cls, dtype: torch.dtype, training: bool = False) -> 'StageDtypes':
        """One precision on every stage, as ``stage_dtypes`` has it (the VAE decoder fp32 under fp16, ...)."""
        return cls(stage_dtypes(dtype, training))

    def __getitem__(self, stage: str) -> torch.dtype:
        if stage not in STAGE_NAMES:
            raise KeyError(stage)
        return self._dtypes[STAGE_NAMES.index(stage)]

    def __iter__(self) -> Iterator[str]:
        return iter(STAGE_NAMES)

    def __len__(self) -> int:
        return len(STAGE_NAMES)

    def __hash__(self) -> int:
        return hash(self._dtypes)

    def __repr__(self) -> str:
        return f'StageDtypes({self.signature})'

    def replace(self, **dtypes: torch.dtype) -> 'StageDtypes':
        """These dtypes with the given stages in others."""
        return StageDtypes(dict(self, **dtypes))

    @property
    def name(self) -> str:
        """'bf16' when every stage computes in it, else the precision of most stages and the others by stage:
        'fp32 (bf16: vae_encoder, vae_decoder)', 'bf16 (fp16: mom, lrc; fp32: vae_decoder)'."""
        names = [dtype_name(d) for d in self._dtypes]
        main = max(('fp32', 'bf16', 'fp16'), key=names.count)  # ties: the more precise
        others = {}
        for stage, name in zip(STAGE_NAMES, names):
            if name != main:
                others.setdefault(name, []).append(stage)
        if not others:
            return main
        return f'{main} (' + '; '.join(f'{name}: {", ".join(stages)}' for name, stages in others.items()) + ')'

    @property
    def signature(self) -> str:
        """Every stage's precision, for cache keys: 'vae_encoder bf16, mom fp32, idm fp32, lrc fp32, vae_decoder
        bf16'."""
        return ', '.join(f'{stage} {dtype_name(d)}' for stage, d in zip(STAGE_NAMES, self._dtypes))


def check_training_precision(dtype: torch.dtype) -> None:
    """Training computes in fp32 or bf16: fp16 gradients underflow without loss scaling, which TOLA's training
    does not do."""
    if dtype == torch.float16:
        raise ValueError('network_g.precision: training in fp16 needs loss scaling, which TOLA does not do; use fp32 '
                         '(the paper) or bf16 (GPUs with native bf16: Ampere and newer; the IDM stays fp32)')
