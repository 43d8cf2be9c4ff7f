"""MACs and parameter counts with mmengine's FlopAnalyzer (fvcore convention: one multiply-add = 1 MAC).

mmengine has no handle for ``aten::scaled_dot_product_attention`` (diffusers' attention) and would skip
it silently; we add one so attention matmuls are counted like the einsums of the official LDM code.
"""
from math import prod
from typing import Any, List, Tuple

import torch
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import get_shape
from torch import nn


def sdpa_mac_handle(inputs: List[Any], outputs: List[Any]) -> int:
    """MACs of softmax(Q K^T) V: Q (..., Lq, d), K (..., Lk, d), V (..., Lk, dv)."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    batch = prod(q[:-2])
    return batch * q[-2] * k[-2] * q[-1] + batch * q[-2] * k[-2] * v[-1]


def count_macs(module: nn.Module, inputs: Tuple[Any, ...]) -> int:
    """Total MACs of ``module(*inputs)`` (traced once, in eval mode, without gradients)."""
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            analyzer = FlopAnalyzer(module, inputs)
            analyzer.set_op_handle('aten::scaled_dot_product_attention', sdpa_mac_handle)
            analyzer.unsupported_ops_warnings(False)
            analyzer.uncalled_modules_warnings(False)
            return int(analyzer.total())
    finally:
        module.train(was_training)


def count_parameters(module: nn.Module) -> int:
    """Number of parameters (trainable or not)."""
    return sum(p.numel() for p in module.parameters())
