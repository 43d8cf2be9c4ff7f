"""Process-wide CUDA math settings of a run: TF32 and deterministic algorithms (options ``allow_tf32`` and
``deterministic``; docs/training_gpus.md).

- ``allow_tf32`` (default false): TF32 rounds the inputs of fp32 convolutions and matmuls to 10 mantissa bits on
  Ampere and newer GPUs. PyTorch's own default (and so the paper's PyTorch 2.11) is TF32 for cuDNN convolutions
  and IEEE fp32 for matmuls. At t = 999 the IDM's ε̂ error reaches ẑ0 multiplied by 101.6, and the text prior's
  ids are argmax choices, so the default here is IEEE fp32 everywhere: a GPU fp32 run computes what a CPU run
  computes. Only CUDA's settings are touched (the CPU's oneDNN keeps its own).
- ``deterministic`` (default false): BasicSR's training sets ``cudnn.benchmark = True`` (fastest kernels, chosen
  by timing, so two runs may differ). True turns benchmarking off and deterministic algorithms on (an operation
  without a deterministic CUDA kernel is then an error naming it), as exact resume on CUDA needs.
"""
import os

import torch

# cuBLAS needs a fixed workspace configuration for deterministic results (CUDA >= 10.2); set before first use.
CUBLAS_WORKSPACE = ':4096:8'


def set_tf32(allow: bool) -> None:
    """TF32 (True) or IEEE fp32 (False) for CUDA's fp32 matmuls and cuDNN convolutions and RNNs. Through the
    ``allow_tf32`` flags: torch 2.14's ``fp32_precision`` settings make its own ``cudnn.flags()`` (which libraries
    and torch use) raise once set to 'ieee', while these flags keep both readers working."""
    torch.backends.cuda.matmul.allow_tf32 = bool(allow)
    torch.backends.cudnn.allow_tf32 = bool(allow)


def tf32_allowed() -> dict:
    """{'matmul': bool, 'conv': bool}: whether CUDA matmuls / cuDNN convolutions may use TF32 now."""
    return {'matmul': torch.backends.cuda.matmul.allow_tf32, 'conv': torch.backends.cudnn.allow_tf32}


def set_deterministic(on: bool) -> None:
    """Deterministic kernels and no cuDNN benchmarking (True); False turns deterministic algorithms off and leaves
    benchmarking as the pipeline set it (BasicSR's training: on)."""
    if on:
        os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', CUBLAS_WORKSPACE)
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(bool(on))


def apply_options(opt) -> None:
    """Apply ``allow_tf32`` and ``deterministic`` of a parsed option dict (absent = false)."""
    set_tf32(bool(opt.get('allow_tf32', False)))
    set_deterministic(bool(opt.get('deterministic', False)))
