"""The image stages of Algorithm 1 that a runtime other than torch may run (the text prior's two, TransOCR's encoder
and greedy step, are ``text_prior_stages.py``'s), each one function of tensors, as torch modules (for conversion,
timing and the torch probe) and run as ``TOLANet.forward`` runs them (``run_torch_stage``):

- 'vae_encoder': image (B, 3, H, W) in [0, 1] -> the posterior's moments (B, 2 x latent, H/4, W/4) (mean and
  log-variance, unclamped: ``quant_conv(encoder(x))``)
- 'idm': [z_t, z_LR] (B, 6, h, w), timestep (B,) int64, context (B, 24, C) -> ε̂ (B, 3, h, w)
- 'vae_decoder': latent / s (B, latent, h, w) -> image (B, 3, 4h, 4w), unclamped
"""
from typing import Dict

import torch
from torch import nn

from tola_plugin.archs import stages
from tola_plugin.archs.precision import autocast, full_precision
from tola_plugin.runtime.text_prior_stages import PRIOR_STAGES

#: the stages a runtime serves whose precision follows the plan (``archs/stages.py``); the largest, the IDM, last
IMAGE_STAGES = tuple(
    sorted((s.name for s in stages.STAGES if s.servable and s.planned), key=lambda name: name == 'idm'))
STAGES = PRIOR_STAGES + IMAGE_STAGES  # every stage a runtime converts; conversion order: the largest last (peak memory)


class EncoderStage(nn.Module):
    """x -> the posterior's moments = quant_conv(encoder(x)) (a module, for conversion and timing)."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, image):
        return self.vae.encode(image).latent_dist.parameters


class DecoderStage(nn.Module):
    """latent -> image (unclamped)."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, latent):
        return self.vae.decode(latent).sample


def stage_modules(idm: nn.Module, vae: nn.Module) -> Dict[str, nn.Module]:
    """stage -> the torch module computing it."""
    return {'vae_encoder': EncoderStage(vae), 'vae_decoder': DecoderStage(vae), 'idm': idm}


def run_torch_stage(module: nn.Module, inputs, dtype: torch.dtype, device) -> torch.Tensor:
    """``module`` (of ``stage_modules``) on ``inputs`` in the compute dtype ``dtype`` (the stage's, of the plan)
    exactly as ``TOLANet.forward`` runs it (autocast), on ``device``; the output in fp32 on the CPU."""
    tensors = [t.to(device) for t in inputs]
    with torch.inference_mode(), autocast(dtype, device):
        out = module(*tensors)
    return full_precision(out).float().cpu()
