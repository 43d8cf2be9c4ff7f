"""Where a one-step restoration's error comes from (tools/one_step_error.py, docs/demo_backbone.md).

At t = 999, ẑ0 = (z_t − √(1−ᾱ) ε̂) / √ᾱ multiplies the IDM's ε error by √(1−ᾱ)/√ᾱ ≈ 102 (Algorithm 1, step 6).
On LR/HR pairs this measures that amplified part next to the error of the LR latent itself, what the LRC
leaves of it, and the ceilings the VAE sets. Latent errors are mean absolute differences on DiffTSR's latent
scale (0.18215 · z, unit standard deviation on HR lines); the reference is s · mode(VAE(HR)) with the frozen
encoder (no LoRA). PSNR: Y channel, 8-bit, no border crop, as the demo report.
"""
import contextlib
from typing import Dict, Sequence

import torch
from peft import PeftModel

from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.metrics.image_metrics import mean_psnr_y8, to_rgb8

#: Seed offset of the second noise draw (the first uses the image index).
SECOND_DRAW = 1_000_000


def _frozen_encoder(vae):
    """The VAE with its encoder LoRA switched off for the block (a no-op without LoRA)."""
    return vae.disable_adapter() if isinstance(vae, PeftModel) else contextlib.nullcontext()


def _l1(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().mean())


@torch.no_grad()
def one_step_error(net, lq: torch.Tensor, gt: torch.Tensor, first_seed: int = 0) -> Dict[str, float]:
    """Error decomposition of TOLANet ``net`` on one batch.

    Args:
        net: TOLANet in eval mode (any text prior; 'gt' priors are not supported here).
        lq, gt: (B, 3, H, W) RGB LR input and HR reference in [0, 1].
        first_seed: image i draws ε with seed first_seed + i, and again with + SECOND_DRAW for the second draw.
    Returns: {'eps_l1': mean |ε̂ − ε|, 'amplification': √(1−ᾱ)/√ᾱ, 'z0_l1': |ẑ0 − s z_HR|,
        'z0_between_draws_l1': |ẑ0(ε_a) − ẑ0(ε_b)| (the part that depends on the noise draw),
        'z_lr_l1': |s z_LR − s z_HR| (the LR latent, through the network's encoder, as an estimate),
        'z0_corr_l1': |ẑ0corr − s z_HR| (absent without LRC), 'psnr_lr', 'psnr_restored',
        'psnr_vae_hr' (decode of the HR latent: the ceiling), 'psnr_vae_lr' (decode of the LR latent)}.
    """
    seeds = [first_seed + i for i in range(lq.shape[0])]
    a = net(lq, noise_seeds=seeds, return_intermediates=True)
    b = net(lq, noise_seeds=[s + SECOND_DRAW for s in seeds], return_intermediates=True)
    with _frozen_encoder(net.vae):
        z_hr = LATENT_SCALE * net.vae.encode(gt).latent_dist.mode()

    hr8 = to_rgb8(gt)

    def psnr(images):
        return mean_psnr_y8(to_rgb8(images), hr8)

    def decode(z_scaled):
        return net.vae.decode(z_scaled / LATENT_SCALE).sample

    out = dict(
        eps_l1=_l1(a['eps_hat'], a['eps']),
        amplification=float(net.sqrt_one_minus_alpha_bar / net.sqrt_alpha_bar),
        z0_l1=_l1(a['z0'], z_hr),
        z0_between_draws_l1=_l1(a['z0'], b['z0']),
        z_lr_l1=_l1(LATENT_SCALE * a['z_lr'], z_hr),
        psnr_lr=psnr(lq),
        psnr_restored=psnr(a['image']),
        psnr_vae_hr=psnr(decode(z_hr)),
        psnr_vae_lr=psnr(decode(LATENT_SCALE * a['z_lr'])),
    )
    if a['delta_r'] is not None:
        out['z0_corr_l1'] = _l1(a['z0_corr'], z_hr)
    return out


def mean_over_batches(parts: Sequence[Dict[str, float]], sizes: Sequence[int]) -> Dict[str, float]:
    """Image-weighted mean of per-batch results (every value is a per-image or per-element mean)."""
    total = float(sum(sizes))
    return {k: sum(p[k] * n for p, n in zip(parts, sizes)) / total for k in parts[0]}
