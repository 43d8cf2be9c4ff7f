"""The runtime decision's one object: ``RuntimePlan`` (device, the path that runs: its backend and each stage's
precision as it computes, what was asked, why this path, which paths were passed over and why), a path
(``BackendPrecision``: a backend and a compute dtype per stage, ``archs/precision.StageDtypes``), and the order in
which paths are tried (``candidate_paths``)."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from tola_plugin.archs.precision import (PRECISIONS, STAGE_NAMES, StageDtypes, cpu_has_fp16_instructions,
                                         cpu_has_native_bf16, cuda_has_fp16_tensor_cores, cuda_has_native_bf16,
                                         dtype_name, precision_dtype)
from tola_plugin.runtime import bf16_speed

BACKENDS = ('auto', 'openvino', 'torch')
FP32 = torch.float32
#: the order in which ``candidate_paths`` gives the stages of a failed 'auto' path back to fp32, one per path: the
#: stage whose low precision moved the one-step latent most first (measured on the demo backbone's frozen route,
#: docs/inference.md "Precision": VAE encoder bf16 3.6 % of |z_LR|, IDM fp16 1.3 %, VAE decoder bf16 0: its error
#: reaches the image only)
NARROWING = STAGE_NAMES  # the forward's order (archs/stages.py), which is also that order


@dataclass(frozen=True)
class BackendPrecision:
    """A path: one way to run the stages, a backend ('torch' or 'openvino') and a compute dtype per stage
    (``dtypes``: ``archs/precision.StageDtypes``; the text prior always fp32)."""
    backend: str
    dtypes: StageDtypes

    @classmethod
    def uniform(cls, backend: str, dtype: torch.dtype) -> 'BackendPrecision':
        """One precision on every stage (``archs/precision.stage_dtypes``: the VAE decoder fp32 under fp16)."""
        return cls(backend, StageDtypes.uniform(dtype))

    @property
    def precision(self) -> str:
        """'bf16' when every stage computes in it, else the precision of most stages and the others by stage
        (``StageDtypes.name``): 'fp32 (bf16: vae_encoder, vae_decoder)'."""
        return self.dtypes.name

    @property
    def name(self) -> str:
        return f'{self.backend} {self.precision}'

    @property
    def signature(self) -> str:
        """Every stage's precision, for cache keys (``StageDtypes.signature``)."""
        return self.dtypes.signature

    @property
    def plain(self) -> bool:
        """The plain fp32 torch route: the reference, nothing to qualify."""
        return self.backend == 'torch' and all(d == FP32 for d in self.dtypes.values())

    def replace(self, **dtypes: torch.dtype) -> 'BackendPrecision':
        """This path with the given stages in other dtypes."""
        return BackendPrecision(self.backend, self.dtypes.replace(**dtypes))


@dataclass(frozen=True)
class RuntimePlan:
    """Where and how the stages run, and why: one object, made by ``serving.Runtime`` when it decides (the network
    gets the path's stage runner, the OpenVINO worker is compiled for its dtypes).

    path: what runs, each stage in the precision it computes (on OpenVINO what it compiled, which can differ from the
    hint: ``requested``). asked: (backend, precision) as requested. reason: why this path (qualified, cached, the
    plain route). passed_over: (path, why) of the paths tried before it. requested: the path that was asked of the
    backend where it computes another (None: as asked)."""
    device: torch.device
    path: BackendPrecision
    asked: Tuple[str, str] = ('torch', 'fp32')
    reason: str = 'the plain fp32 torch route'
    passed_over: Tuple[Tuple[str, str], ...] = field(default_factory=tuple)
    requested: Optional[BackendPrecision] = None

    @classmethod
    def reference(cls, device) -> 'RuntimePlan':
        """The plain fp32 torch route on ``device``."""
        return cls(torch.device(device), BackendPrecision.uniform('torch', FP32))

    @property
    def backend(self) -> str:
        return self.path.backend

    @property
    def dtypes(self) -> StageDtypes:
        return self.path.dtypes

    @property
    def precision(self) -> str:
        return self.path.precision

    def describe(self) -> str:
        """One line: 'runtime: cpu, openvino fp32 (bf16: vae_decoder) (asked backend auto, precision auto): <reason>;
        passed over: ...'; where the backend computes another precision than requested, that too."""
        line = (f'runtime: {self.device}, {self.path.name} (asked backend {self.asked[0]}, precision '
                f'{self.asked[1]}): {self.reason}')
        if self.requested is not None and self.requested != self.path:
            line += f'; {substitutions(self.requested, self.path)}'
        if self.passed_over:
            line += '; passed over: ' + '; '.join(f'{name}: {why}' for name, why in self.passed_over)
        return line

    def to_dict(self):
        return {
            'device': str(self.device), 'backend': self.backend, 'precision': self.precision,
            'stages': {stage: dtype_name(d)
                       for stage, d in self.dtypes.items()},
            'requested': None if self.requested is None else self.requested.precision,
            'asked': {'backend': self.asked[0],
                      'precision': self.asked[1]}, 'reason': self.reason, 'passed_over': [{'path': p, 'why': w}
                                                                                          for p, w in self.passed_over]
        }


def substitutions(requested: BackendPrecision, running: BackendPrecision) -> str:
    """What a backend computes in another precision than ``requested``: 'OpenVINO computes vae_encoder, idm in fp32
    where bf16 was requested on this CPU' ('' when nothing differs)."""
    groups: Dict[Tuple[str, str], List[str]] = {}
    for stage in STAGE_NAMES:
        asked, got = requested.dtypes[stage], running.dtypes[stage]
        if asked != got:
            groups.setdefault((dtype_name(asked), dtype_name(got)), []).append(stage)
    return '; '.join(f'OpenVINO computes {", ".join(stages)} in {got} where {asked} was requested on this CPU'
                     for (asked, got), stages in groups.items())


def fast_dtypes(device: torch.device) -> Dict[str, torch.dtype]:
    """The stage precisions 'auto' tries first on ``device``: the IDM, whose ε̂ error reaches ẑ0 x 101.6, in the most
    precise type that is fast there (fp16 on GPUs with fp16 tensor cores, on CPUs with fp16 instructions where fp16
    measured faster: ``bf16_speed``; else fp32); the VAE encoder and decoder in bf16 where bf16 is fast (GPUs with
    native bf16; CPUs with bf16 instructions where it measured faster), else fp32; the MoM text encoder and the LRC
    in fp32 (under 0.1 % of the work: nothing to gain). A precision without hardware (emulated) is never tried nor
    measured."""
    if device.type == 'cuda':
        idm = torch.float16 if cuda_has_fp16_tensor_cores(device) else FP32
        low = torch.bfloat16 if cuda_has_native_bf16(device) else FP32
    elif device.type == 'cpu':
        idm = torch.float16 if cpu_has_fp16_instructions() and bf16_speed.is_faster('fp16') else FP32
        low = torch.bfloat16 if cpu_has_native_bf16() and bf16_speed.is_faster('bf16') else FP32
    else:
        idm = low = FP32
    return {'vae_encoder': low, 'mom': FP32, 'idm': idm, 'lrc': FP32, 'vae_decoder': low}


def auto_paths(backend: str, device: torch.device) -> List[BackendPrecision]:
    """'auto''s paths on ``backend``, in order: the fast stage precisions (``fast_dtypes``), then the same with one
    more stage back in fp32 each (``NARROWING`` order), ending with fp32 on every stage."""
    path = BackendPrecision(backend, StageDtypes(fast_dtypes(device)))
    paths = [path]
    for stage in NARROWING:
        if path.dtypes[stage] != FP32:
            path = path.replace(**{stage: FP32})
            paths.append(path)
    return paths


def check_precision(precision: str) -> str:
    """A requested precision: ``precision`` when it is one of ``archs/precision.PRECISIONS``, else a ValueError
    naming them."""
    if precision not in PRECISIONS:
        raise ValueError(f'precision must be one of {PRECISIONS}, got {precision!r}')
    return precision


def candidate_paths(device: torch.device, backends: List[str], precision: str) -> List[BackendPrecision]:
    """The paths to try, in order, for ``backends`` (resolved: 'openvino' and/or 'torch', preferred first) and the
    requested ``precision``: an explicit precision on every stage of each backend; 'auto': ``auto_paths`` on the
    first backend, then on the next."""
    if check_precision(precision) == 'auto':
        return [path for backend in backends for path in auto_paths(backend, device)]
    return [BackendPrecision.uniform(backend, precision_dtype(precision)) for backend in backends]
