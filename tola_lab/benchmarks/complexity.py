"""MACs and parameter counts with mmengine's FlopAnalyzer (fvcore convention: one multiply-add = 1 MAC).

mmengine has no handle for ``aten::scaled_dot_product_attention`` (diffusers' attention) and would skip
it silently; we add one so attention matmuls are counted like the einsums of the official LDM code.
"""
from math import prod
from typing import Any, Dict, List, Tuple

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


def route_macs(net, lq) -> Dict[str, int]:
    """Multiply-adds of the tensor stages of one (1, 3, H, W) restore of the torch network ``net`` (mmengine's
    counter): VAE encoder, IDM, VAE decoder, LRC, TransOCR's encoder. The text prior's decoding steps and the MoM
    text encoder (well under 1 %) are left out."""

    class Call(torch.nn.Module):

        def __init__(self, owner, fn):
            super().__init__()
            self.owner, self.fn = owner, fn
            self.eval()  # count_macs restores this mode on the owner afterwards: it must stay eval (dropout)

        def forward(self, *args):
            return self.fn(*args)

    with torch.no_grad():
        z = net.vae.encode(lq).latent_dist.mode()
        context = torch.zeros(1, 24, net.context_dim)
        t = torch.full((1, ), net.timestep, dtype=torch.long)
        macs = {
            'VAE encoder': count_macs(Call(net.vae, lambda x: net.vae.encode(x).latent_dist.mode()), (lq, )),
            'IDM': count_macs(net.idm, (torch.cat([z, z], 1), t, context)),
            'VAE decoder': count_macs(Call(net.vae, lambda x: net.vae.decode(x).sample), (z, )),
            'TransOCR encoder': count_macs(Call(net.transocr, lambda x: net.transocr.encode(x)), (lq, )),
        }
        if net.lrc is not None:
            macs['LRC'] = count_macs(net.lrc, (torch.cat([z, z], 1), ))
    return macs
