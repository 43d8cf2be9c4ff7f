"""Where a one-step restoration's error comes from (tools/one_step_error.py, docs/demo_backbone.md).

At t = 999, ẑ0 = (z_t − √(1−ᾱ) ε̂) / √ᾱ multiplies the IDM's ε error by √(1−ᾱ)/√ᾱ ≈ 102 (Algorithm 1, step 6).
On LR/HR pairs this measures that amplified part next to the error of the LR latent itself, what the LRC
leaves of it, and the ceilings the VAE sets. Latent errors are mean absolute differences on DiffTSR's latent
scale (0.18215 · z, unit standard deviation on HR lines); the reference is s · mode(VAE(HR)) with the frozen
encoder (no LoRA). PSNR: Y channel, 8-bit, no border crop, as the demo report. ``measure_option_file`` runs it on
the test dataset of an option file (the body of tools/one_step_error.py).
"""
import contextlib
import json
import sys
from typing import Dict, Optional, Sequence

import torch
from peft import PeftModel

from basicsr.archs import build_network

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.archs.tola_loading import read_tola_options
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.data.image_io import tensor_to_uint8
from tola_plugin.data.text_degradation_dataset import TextDegradationDataset, held_out_dataset_opt
from tola_plugin.metrics.image_metrics import mean_psnr_y8
from tola_plugin.utils.atomic_files import atomic_write
from tola_plugin.utils.user_text import say

#: Seed offset of the second noise draw (the first uses the image index).
SECOND_DRAW = 1_000_000
#: What each printed quantity is, in print order.
DESCRIPTIONS = {
    'eps_l1': "IDM noise error |eps_hat - eps|",
    'amplification': 'its factor in z0: sqrt(1 - abar) / sqrt(abar)',
    'z0_l1': 'one-step z0 error |z0 - s z_HR|',
    'z0_between_draws_l1': 'z0 change between two noise draws',
    'z_lr_l1': 'LR latent error |s z_LR - s z_HR|',
    'z0_corr_l1': 'after the LRC |z0corr - s z_HR|',
    'psnr_lr': 'PSNR LR input (dB)',
    'psnr_restored': 'PSNR restored (dB)',
    'psnr_vae_hr': 'PSNR VAE decode of the HR latent: ceiling (dB)',
    'psnr_vae_lr': 'PSNR VAE decode of the LR latent (dB)',
}


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

    hr8 = tensor_to_uint8(gt)

    def psnr(images):
        return mean_psnr_y8(tensor_to_uint8(images), hr8)

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


def measure_option_file(opt_path: str, checkpoint: Optional[str] = None, frozen: bool = False, num: int = 0,
                        batch: int = 8, out: Optional[str] = None) -> int:
    """``one_step_error`` over the test dataset of the TOLA option file ``opt_path`` (a TextDegradationDataset
    with a fixed seed; the first ``num`` lines, 0 = all, ``batch`` lines per forward pass), with the adaptation
    checkpoint of path.pretrain_network_g or ``checkpoint``; ``frozen``: without LoRA and LRC (the frozen one-step
    route). Prints one line per quantity (``DESCRIPTIONS``) and writes them to ``out`` (JSON) when given. -> 0.
    ValueError for a network with ground-truth text priors."""
    opt = read_tola_options(opt_path)
    if frozen:
        net = build_network(dict(opt['network_g'], idm_lora=False, vae_lora=False, lrc=None)).eval()
    else:
        net = TOLANet.from_options(opt_path, checkpoint)
    if net.text_prior == 'gt':
        raise ValueError(f"{opt_path}: network_g.text_prior 'gt' needs ground-truth tokens; use 'predicted'")
    dataset = TextDegradationDataset(held_out_dataset_opt(opt, opt_path))
    count = min(num or len(dataset), len(dataset))
    parts, sizes = [], []
    for start in range(0, count, batch):
        items = [dataset[i] for i in range(start, min(start + batch, count))]
        lq = torch.stack([it['lq'] for it in items])
        gt = torch.stack([it['gt'] for it in items])
        parts.append(one_step_error(net, lq, gt, first_seed=start))
        sizes.append(len(items))
    result = dict(mean_over_batches(parts, sizes), lines=count, frozen=frozen)
    for key, text in DESCRIPTIONS.items():
        if key in result:
            print(f'{text:<48} {result[key]:10.4f}')
    if out:

        def write(tmp):
            with open(tmp, 'w', encoding='utf-8') as f:
                json.dump(result, f, indent=1)

        atomic_write(out, write)
        say(f'wrote {out}', sys.stdout)
    return 0
