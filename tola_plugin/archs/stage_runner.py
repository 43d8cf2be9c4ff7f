"""How a TOLANet runs the six stages of Algorithm 1 (``archs/stages.py``), and in which precision each computes: one
object, ``StageRunner``, that ``TOLANet.forward`` calls (``net.stage_runner``), one method (verb) a stage.

The verbs: ``read_text`` (TransOCR's greedy reading for the text prior), ``encode`` (the VAE encoder: image -> the
posterior of z_LR), ``encode_text`` (the MoM text encoder: tokens -> C_cond), ``denoise`` (the IDM: [z_t, z_LR], t,
C_cond -> ε̂), ``correct`` (the LRC: [z_LR, r] -> Δr), ``decode`` (the VAE decoder: latent / s -> image);
``stage_dtypes``: each planned stage's compute dtype. The forward keeps Algorithm 1's own arithmetic and wraps each
stage in its ``autocast``; a runner computes the stage only.

This module's ``StageRunner`` is torch's, every network's by default: the network's own modules. The runtime
(``tola_plugin.runtime``) builds another (``runtime/routed_stages.RoutedStages``: OpenVINO's worker, or the recorder
of the qualification's reference) and installs it with ``TOLANet.running``, the one way that changes how a
network runs.
"""
from typing import Optional, Tuple

import torch

from tola_plugin.archs.precision import StageDtypes, requested_dtype


class StageRunner:
    """The stages on the network's own torch modules. ``dtypes``: each stage's compute dtype as a runtime decided it;
    None (the default): the network's precision switch as asked (``archs/precision.requested_dtype``: 'auto' is fp32;
    in training bf16 keeps the IDM in fp32). ``name``: what messages call this way of running ('torch fp32')."""

    def __init__(self, dtypes: Optional[StageDtypes] = None, name: str = ''):
        self.dtypes = dtypes
        self.name = name or ('torch ' + dtypes.name if dtypes is not None else 'torch (the precision switch)')

    def stage_dtypes(self, net, device) -> StageDtypes:
        """Stage -> the dtype ``net``'s forward computes it in on ``device``."""
        if self.dtypes is not None:
            return self.dtypes
        return StageDtypes.uniform(requested_dtype(net.precision, device), training=net.training)

    def encode(self, net, image: torch.Tensor):
        """Image (B, 3, H, W) in [0, 1] -> the posterior of the unscaled z_LR (diffusers' DiagonalGaussianDistribution:
        ``mode()``, ``sample(generator)``, ``mean``)."""
        return net.vae.encode(image).latent_dist

    def encode_text(self, net, tokens, confidences, batch: int, like: torch.Tensor) -> torch.Tensor:
        """IDM tokens (B, 24) with confidences (B, 24) or None -> C_cond (B, 24, C) (``TOLANet.text_context``)."""
        return net.text_context(tokens, confidences, batch, like)

    def correct(self, net, latent_and_residual: torch.Tensor) -> torch.Tensor:
        """cat[z_LR, r] (B, 6, h, w) -> Δr (B, 3, h, w): the LRC."""
        return net.lrc(latent_and_residual)

    def denoise(self, net, sample: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """[z_t, z_LR] (B, 6, h, w), timestep (B,) long, C_cond (B, 24, C) -> ε̂ (B, 3, h, w)."""
        return net.idm(sample, timestep, context)

    def decode(self, net, latent: torch.Tensor) -> torch.Tensor:
        """Latent / s (B, latent, h, w) -> image (B, 3, 4h, 4w), unclamped."""
        return net.vae.decode(latent).sample

    def read_text(self, net, images: torch.Tensor, max_steps: int, incremental: bool,
                  stop_at_end: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        """TransOCR's greedy reading of ``images`` -> (ids (B, S) long, probs (B, S)): ``TransOCR.greedy_decode``."""
        return net.transocr.greedy_decode(images, max_steps=max_steps, incremental=incremental, stop_at_end=stop_at_end)
