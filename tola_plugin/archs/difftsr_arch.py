"""DiffTSRNet: the 200-step DiffTSR route (the paper's main baseline), beside TOLANet's one step.

Exactly the official ``DiffTSR_pipline.DiffTSR_sample`` with ``general=True`` (docs/backbone.md, "The official
route"): TransOCR once -> c_t; z_LR = VAE posterior sample (unscaled); z_T = q_sample(z_LR, t=999); 200 DDIM steps
(eta 0.2, t = 996 ... 1) of eps = IDM(cat[z_t, z_LR], t, C_cond) with C_cond = MoM text encoder(c_t) computed
once; decode z_0 / 0.18215; clamp to [0, 1]. The TDM and the MoM U-Net (whose I_cond only feeds the TDM) are
not run: with general=True they cannot change the result, and neither draws random numbers.

Random numbers are drawn in the official order and shapes (posterior noise, q_sample noise, one DDIM noise per
step), so with a generator seeded S the result equals the official run after ``torch.manual_seed(S)`` (batch 1,
CPU). A CPU generator gives the same draws on any device (``DiffTSRModel`` seeds one).
"""
from typing import Optional

import torch
from diffusers.utils.torch_utils import randn_tensor
from torch import nn

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.backbone_builder import build_backbone
from tola_plugin.archs.diffusion_schedule import START_TIMESTEP, make_ldm_scheduler
from tola_plugin.archs.vae_arch import LATENT_MODES, LATENT_SCALE
from tola_plugin.text.text_prior import transocr_to_idm


@torch.no_grad()
def difftsr_sample(idm, vae, mom, lq: torch.Tensor, c_t: torch.Tensor, scheduler, eta: float = 0.2,
                   generator: Optional[torch.Generator] = None, latent: str = 'sample') -> torch.Tensor:
    """DiffTSR's DDIM route from an LR image and its text prior.

    Args:
        lq: (B,3,H,W) RGB in [0,1] (official: 128x512).
        c_t: (B,24) IDM-alphabet ids (pad/unknown 6735).
        scheduler: ``make_ldm_scheduler('ddim', steps)`` (timesteps already set).
        eta: DDIM eta (0.2). generator: torch.Generator or None (global RNG, as the official code).
        latent: 'sample' (official) or 'mode' (the posterior mean: deterministic z_LR).
    Returns:
        (B,3,H,W) restored image in [0,1].
    """
    if latent not in LATENT_MODES:
        raise ValueError(f'latent must be one of {LATENT_MODES}, got {latent!r}')
    dist = vae.encode(lq).latent_dist
    z_lr = dist.sample(generator) if latent == 'sample' else dist.mode()  # unscaled
    # diffusers' randn_tensor (as the posterior sample and the DDIM steps): a CPU generator draws on the CPU and the
    # noise is moved to z_LR's device, so the same seed gives the same noise on a GPU (torch.randn would refuse)
    noise = randn_tensor(z_lr.shape, generator=generator, device=z_lr.device, dtype=z_lr.dtype)
    start = torch.full((z_lr.shape[0], ), START_TIMESTEP, dtype=torch.long, device=z_lr.device)
    z = scheduler.add_noise(z_lr, noise, start)  # sampling starts from the noised LR latent, not pure noise
    c_cond = mom.encode_text(c_t)  # independent of t and z: once
    for t in scheduler.timesteps:
        eps = idm(torch.cat([z, z_lr], dim=1), t.to(z.device).expand(z.shape[0]), c_cond)
        z = scheduler.step(eps, t, z, eta=eta, generator=generator).prev_sample
    # official: 1. / scale_factor * z (a multiplication, bit-for-bit different from a division)
    return vae.decode((1. / LATENT_SCALE) * z).sample.clamp(0, 1)


@ARCH_REGISTRY.register()
class DiffTSRNet(nn.Module):
    """The official DiffTSR route, frozen. lq (B, 3, H, W) RGB in [0, 1] -> restored (B, 3, H, W) in [0, 1].

    Args:
        difftsr_checkpoint: official ``DiffTSR.ckpt`` or the converted ``.safetensors`` (tools/convert_difftsr.py).
        transocr_checkpoint: official ``transocr.pth`` (or our ``.safetensors``).
        idm_config, vae_config, mom_config, transocr_config: constructor overrides of the modules (tiny test
            configs; absent = official sizes, or the converted file's own).
        steps: DDIM steps (200, official). eta: DDIM eta in [0, 1] (0.2, official).
        latent: 'sample' (z_LR = VAE posterior sample, official) or 'mode' (the posterior mean: deterministic z_LR).
    H and W must be multiples of ``stride`` (the VAE's and then the IDM's down-sampling).
    """

    def __init__(self, difftsr_checkpoint='checkpoints/DiffTSR.ckpt', transocr_checkpoint='checkpoints/transocr.pth',
                 idm_config=None, vae_config=None, mom_config=None, transocr_config=None, steps=200, eta=0.2,
                 latent='sample'):
        super().__init__()
        if latent not in LATENT_MODES:
            raise ValueError(f'DiffTSRNet: latent must be one of {LATENT_MODES}, got {latent!r}')
        if not 0 <= float(eta) <= 1:
            raise ValueError(f'DiffTSRNet: eta must be in [0, 1], got {eta!r}')
        for name, value in (('difftsr_checkpoint', difftsr_checkpoint), ('transocr_checkpoint', transocr_checkpoint)):
            if not value:
                raise ValueError(f'DiffTSRNet: {name} is required (the official DiffTSR.ckpt / transocr.pth)')
        self.idm, self.vae, self.mom, self.transocr = build_backbone('checkpoint', difftsr_checkpoint,
                                                                     transocr_checkpoint, idm_config, vae_config,
                                                                     mom_config, transocr_config)
        self.requires_grad_(False)
        self.eval()
        self.eta, self.latent = float(eta), latent
        self.scheduler = make_ldm_scheduler('ddim', int(steps))
        self.stride = (2**(len(self.vae.config.block_out_channels) - 1) *
                       2**(len(self.idm.config.block_out_channels) - 1))

    def train(self, mode: bool = True):
        """Always eval mode: nothing here is trained (TransOCR's BatchNorm and dropout stay frozen)."""
        return super().train(False)

    @torch.no_grad()
    def text_prior(self, lq: torch.Tensor) -> torch.Tensor:
        """c_t (B, 24) IDM-alphabet ids (6735 = pad/unknown): TransOCR's greedy reading of ``lq``, mapped as
        DiffTSR's ``Text_Prediction`` does (docs/transocr.md, "The text prior")."""
        ids, probs = self.transocr.greedy_decode(lq)
        return transocr_to_idm(ids, probs)[0]

    @torch.no_grad()
    def forward(self, lq: torch.Tensor, generator: Optional[torch.Generator] = None, return_text_prior: bool = False):
        """The official route on ``lq`` (B, 3, H, W) in [0, 1], H and W multiples of ``stride``.

        generator: draws the posterior, q-sample and DDIM noises (None: torch's global RNG, as the official
        script). Returns the restored (B, 3, H, W) in [0, 1], or (restored, c_t) with ``return_text_prior``.
        """
        if lq.dim() != 4 or lq.shape[1] != 3 or lq.shape[2] % self.stride or lq.shape[3] % self.stride:
            raise ValueError(f'DiffTSRNet: lq must be (B,3,H,W) with H, W multiples of {self.stride}, '
                             f'got {tuple(lq.shape)}')
        c_t = self.text_prior(lq)
        out = difftsr_sample(self.idm, self.vae, self.mom, lq, c_t, self.scheduler, eta=self.eta, generator=generator,
                             latent=self.latent)
        return (out, c_t) if return_text_prior else out
