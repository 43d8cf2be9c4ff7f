"""The tensor stages of Algorithm 1 that a runtime other than torch may run: the text prior's two (TransOCR's encoder
and greedy step: ``text_prior_stages.py``), the VAE encoder, the IDM and the VAE decoder, each one function of
tensors, and the modules with the calls ``TOLANet.forward`` makes that route those calls to a stage runner
(OpenVINO's worker, or a recorder of the torch route for qualification).

- 'vae_encoder': image (B, 3, H, W) in [0, 1] -> the posterior's moments (B, 2 x latent, H/4, W/4) (mean and
  log-variance, unclamped: ``quant_conv(encoder(x))``)
- 'idm': [z_t, z_LR] (B, 6, h, w), timestep (B,) int64, context (B, 24, C) -> ε̂ (B, 3, h, w)
- 'vae_decoder': latent / s (B, latent, h, w) -> image (B, 3, 4h, 4w), unclamped
"""
from typing import Callable, Dict

import torch
from diffusers.models.autoencoders.vae import DecoderOutput, DiagonalGaussianDistribution
from diffusers.models.modeling_outputs import AutoencoderKLOutput
from torch import nn

from tola_plugin.archs.precision import autocast, full_precision
from tola_plugin.runtime.text_prior_stages import PRIOR_STAGES

#: the stages whose precision follows the plan on every backend (the torch route runs the text prior in fp32 always)
IMAGE_STAGES = ('vae_encoder', 'vae_decoder', 'idm')
STAGES = PRIOR_STAGES + IMAGE_STAGES  # every stage a runtime converts; conversion order: the largest last (peak memory)

Runner = Callable[..., torch.Tensor]  # runner(stage, *tensors) -> the stage's output (fp32)


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


class RoutedIDM(nn.Module):
    """The IDM's call (``forward(sample, timestep, encoder_hidden_states) -> eps``) routed to ``runner('idm', ...)``."""

    def __init__(self, runner: Runner, config=None):
        super().__init__()
        self.runner, self.config = runner, config

    def forward(self, sample, timestep, encoder_hidden_states):
        timestep = torch.as_tensor(timestep, dtype=torch.long).reshape(-1).expand(sample.shape[0]).contiguous()
        return self.runner('idm', sample, timestep, encoder_hidden_states)


class RoutedVAE(nn.Module):
    """The VAE's calls (``encode(x).latent_dist``, ``decode(z).sample``, as diffusers' AutoencoderKL) routed to
    ``runner('vae_encoder', x)`` / ``runner('vae_decoder', z)``."""

    def __init__(self, runner: Runner, config):
        super().__init__()
        self.runner, self.config = runner, config

    def encode(self, image):
        return AutoencoderKLOutput(latent_dist=DiagonalGaussianDistribution(self.runner('vae_encoder', image)))

    def decode(self, latent):
        return DecoderOutput(sample=self.runner('vae_decoder', latent))
