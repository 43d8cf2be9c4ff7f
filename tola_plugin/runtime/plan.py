"""The runtime decision's one object: ``RuntimePlan`` (device, backend, compute dtype, what was asked, why this path,
which paths were passed over and why), and the order in which paths are tried (``candidate_paths``)."""
from dataclasses import dataclass, field
from typing import List, Tuple

import torch

from tola_plugin.archs.precision import (PRECISIONS, cpu_has_native_bf16, cuda_has_native_bf16, dtype_name,
                                         precision_dtype)
from tola_plugin.runtime import bf16_speed

BACKENDS = ('auto', 'openvino', 'torch')


@dataclass(frozen=True)
class Path:
    """One way to run the stages: a backend ('torch' or 'openvino') in a compute dtype."""
    backend: str
    dtype: torch.dtype

    @property
    def name(self) -> str:
        return f'{self.backend} {dtype_name(self.dtype)}'

    @property
    def plain(self) -> bool:
        """The plain fp32 torch route: the reference, nothing to qualify."""
        return self.backend == 'torch' and self.dtype == torch.float32


@dataclass(frozen=True)
class RuntimePlan:
    """Where and how the stages run, and why: one object, made once by ``placement.Runtime`` and passed to the
    network (``TOLANet.plan``: its compute dtype) and to the stages (the OpenVINO worker is compiled for ``dtype``).

    asked: (backend, precision) as requested. reason: why this path (qualified, cached, the plain route).
    passed_over: (path, why) of the paths tried before it."""
    device: torch.device
    backend: str
    dtype: torch.dtype
    asked: Tuple[str, str] = ('torch', 'fp32')
    reason: str = 'the plain fp32 torch route'
    passed_over: Tuple[Tuple[str, str], ...] = field(default_factory=tuple)

    @classmethod
    def reference(cls, device) -> 'RuntimePlan':
        """The plain fp32 torch route on ``device``."""
        return cls(torch.device(device), 'torch', torch.float32)

    @property
    def path(self) -> Path:
        return Path(self.backend, self.dtype)

    @property
    def precision(self) -> str:
        return dtype_name(self.dtype)

    def describe(self) -> str:
        """One line: 'runtime: cpu, openvino bf16 (asked backend auto, precision auto): <reason>; passed over: ...'."""
        line = (f'runtime: {self.device}, {self.backend} {self.precision} (asked backend {self.asked[0]}, precision '
                f'{self.asked[1]}): {self.reason}')
        if self.passed_over:
            line += '; passed over: ' + '; '.join(f'{name}: {why}' for name, why in self.passed_over)
        return line

    def to_dict(self):
        return {
            'device': str(self.device), 'backend': self.backend, 'precision': self.precision,
            'asked': {'backend': self.asked[0], 'precision': self.asked[1]}, 'reason': self.reason,
            'passed_over': [{'path': p, 'why': w} for p, w in self.passed_over]
        }


def low_precision(device: torch.device) -> List[torch.dtype]:
    """The low precision 'auto' tries first on ``device``: on CUDA bf16 (fp16 without native bf16); on a CPU bf16
    where it has bf16 instructions and bf16 measured faster (``bf16_speed``); else none."""
    if device.type == 'cuda':
        return [torch.bfloat16 if cuda_has_native_bf16(device) else torch.float16]
    if device.type == 'cpu' and cpu_has_native_bf16() and bf16_speed.bf16_is_faster():
        return [torch.bfloat16]
    return []


def candidate_paths(device: torch.device, backends: List[str], precision: str) -> List[Path]:
    """The paths to try, in order, for ``backends`` (resolved: 'openvino' and/or 'torch', preferred first) and the
    requested ``precision``: an explicit precision on each backend; 'auto': the low precision (``low_precision``)
    then fp32 on the first backend, then on the next (OpenVINO bf16, OpenVINO fp32, torch bf16, torch fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f'precision must be one of {PRECISIONS}, got {precision!r}')
    dtypes = (low_precision(device) + [torch.float32]) if precision == 'auto' else [precision_dtype(precision)]
    return [Path(backend, dtype) for backend in backends for dtype in dtypes]
