"""The 200-step DiffTSR route (the paper's main baseline) as a test/validation-only BasicSR model.

Exactly the official ``DiffTSR_pipline.DiffTSR_sample`` with ``general=True`` (SPEC §0):
TransOCR once -> c_t; z_LR = VAE posterior sample (unscaled); z_T = q_sample(z_LR, t=999); 200 DDIM steps
(eta 0.2, t = 996 ... 1) of eps = IDM(cat[z_t, z_LR], t, C_cond) with C_cond = MoM text encoder(c_t) computed
once; decode z_0 / 0.18215; clamp to [0, 1]. The TDM and the MoM U-Net (whose I_cond only feeds the TDM) are
not run: with general=True they cannot change the result, and neither draws random numbers.

Random numbers are drawn in the official order and shapes (posterior noise, q_sample noise, one DDIM noise per
step), so with ``seed: S`` the result equals the official run after ``torch.manual_seed(S)`` (batch 1, CPU).
"""
from typing import Optional

import torch

from basicsr.models.base_model import BaseModel
from basicsr.models.sr_model import SRModel
from basicsr.utils import get_root_logger
from basicsr.utils.registry import MODEL_REGISTRY

from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.text.text_prior import transocr_to_idm
from tola_plugin.checkpoints.difftsr import load_difftsr
from tola_plugin.archs.diffusion_schedule import START_TIMESTEP, make_ldm_scheduler
from tola_plugin.checkpoints.transocr import load_transocr

SAMPLER_DEFAULTS = {'steps': 200, 'eta': 0.2, 'seed': None, 'posterior': 'sample', 'input_size': (128, 512)}
POSTERIOR_MODES = ('sample', 'mean')


@torch.no_grad()
def difftsr_sample(idm, vae, mom, lq: torch.Tensor, c_t: torch.Tensor, scheduler, eta: float = 0.2,
                   generator: Optional[torch.Generator] = None, posterior: str = 'sample') -> torch.Tensor:
    """DiffTSR's DDIM route from an LR image and its text prior.

    Args:
        lq: (B,3,H,W) RGB in [0,1] (official: 128x512).
        c_t: (B,24) IDM-alphabet ids (pad/unknown 6735).
        scheduler: ``make_ldm_scheduler('ddim', steps)`` (timesteps already set).
        eta: DDIM eta (0.2). generator: torch.Generator or None (global RNG, as the official code).
        posterior: 'sample' (official) or 'mean' (deterministic z_LR).
    Returns:
        (B,3,H,W) restored image in [0,1].
    """
    if posterior not in POSTERIOR_MODES:
        raise ValueError(f'posterior must be one of {POSTERIOR_MODES}, got {posterior!r}')
    dist = vae.encode(lq).latent_dist
    z_lr = dist.sample(generator) if posterior == 'sample' else dist.mode()  # unscaled
    noise = torch.randn(z_lr.shape, generator=generator, device=z_lr.device, dtype=z_lr.dtype)
    start = torch.full((z_lr.shape[0], ), START_TIMESTEP, dtype=torch.long, device=z_lr.device)
    z = scheduler.add_noise(z_lr, noise, start)  # sampling starts from the noised LR latent, not pure noise
    c_cond = mom.encode_text(c_t)  # independent of t and z: once
    for t in scheduler.timesteps:
        eps = idm(torch.cat([z, z_lr], dim=1), t.to(z.device).expand(z.shape[0]), c_cond)
        z = scheduler.step(eps, t, z, eta=eta, generator=generator).prev_sample
    # official: 1. / scale_factor * z (a multiplication, bit-for-bit different from a division)
    return vae.decode((1. / LATENT_SCALE) * z).sample.clamp(0, 1)


@MODEL_REGISTRY.register()
class DiffTSRModel(SRModel):
    """Test/validation-only BasicSR model running the official DiffTSR route.

    Options:
        network_difftsr.difftsr_checkpoint: official DiffTSR.ckpt or converted .safetensors (required).
        network_difftsr.transocr_checkpoint: official transocr.pth (required).
        network_difftsr.{idm,vae,mom,transocr}_config: optional constructor overrides (tiny test configs;
            absent = official sizes). (Not under ``path:``: BasicSR's make_exp_dirs creates every path there.)
        sampler: {steps: 200, eta: 0.2, seed: null, posterior: sample|mean, input_size: [128, 512]}. ``seed``
            re-seeds a generator for every batch (results independent of dataset order); null uses torch's
            global RNG. ``input_size`` is the required (H, W) of lq (the official canvas; the data pipeline
            resizes to it, as PairedTextDataset does); null accepts any multiple of the latent stride.
    feed_data: ``lq`` (B,3,H,W) RGB in [0,1], optional ``gt``. Validation (image saving, metrics) is BasicSR's
    SRModel.nondist_validation.
    """

    own_option_blocks = ('network_difftsr', )  # no arch type: checked key by key in __init__ (option_checks)

    def __init__(self, opt):
        BaseModel.__init__(self, opt)  # SRModel.__init__ would build a single net_g
        if self.is_train:
            raise ValueError('DiffTSRModel is test/validation only (is_train must be false); train TOLA instead')
        nets_opt = dict(opt.get('network_difftsr') or {})
        allowed = {'difftsr_checkpoint', 'transocr_checkpoint', 'idm_config', 'vae_config', 'mom_config',
                   'transocr_config'}
        unknown = set(nets_opt) - allowed
        if unknown:
            raise ValueError(f'network_difftsr: unknown option(s) {sorted(unknown)}; expected {sorted(allowed)}')
        for key in ('difftsr_checkpoint', 'transocr_checkpoint'):
            if not nets_opt.get(key):
                raise ValueError(f'option network_difftsr.{key} is required (official DiffTSR.ckpt / transocr.pth)')
        configs = {c: nets_opt.get(f'{c}_config') or {} for c in ('idm', 'vae', 'mom')}
        nets = load_difftsr(nets_opt['difftsr_checkpoint'], ('idm', 'vae', 'mom'), configs=configs)
        self.net_idm, self.net_vae, self.net_mom = (nets[c].to(self.device).requires_grad_(False)
                                                    for c in ('idm', 'vae', 'mom'))
        self.net_ocr = load_transocr(nets_opt['transocr_checkpoint'], **(nets_opt.get('transocr_config') or {}))
        self.net_ocr = self.net_ocr.to(self.device).eval().requires_grad_(False)

        sampler = dict(opt.get('sampler') or {})
        unknown = set(sampler) - set(SAMPLER_DEFAULTS)
        if unknown:
            raise ValueError(f'sampler: unknown option(s) {sorted(unknown)}; expected {sorted(SAMPLER_DEFAULTS)}')
        self.sampler_opt = {**SAMPLER_DEFAULTS, **sampler}
        if self.sampler_opt['posterior'] not in POSTERIOR_MODES:
            raise ValueError(f'sampler.posterior must be one of {POSTERIOR_MODES}, got '
                             f'{self.sampler_opt["posterior"]!r}')
        if not 0 <= float(self.sampler_opt['eta']) <= 1:
            raise ValueError(f'sampler.eta must be in [0, 1], got {self.sampler_opt["eta"]!r}')
        self.scheduler = make_ldm_scheduler('ddim', int(self.sampler_opt['steps']))
        # the image must survive the VAE's and then the IDM's down-sampling
        self.stride = (2**(len(self.net_vae.config.block_out_channels) - 1) *
                       2**(len(self.net_idm.config.block_out_channels) - 1))
        get_root_logger().info(f'DiffTSRModel: {self.sampler_opt}, input stride {self.stride}')

    def feed_data(self, data):
        lq = data['lq']
        size = self.sampler_opt['input_size']
        if lq.dim() != 4 or lq.shape[1] != 3 or lq.shape[2] % self.stride or lq.shape[3] % self.stride or (
                size is not None and tuple(lq.shape[2:]) != tuple(size)):
            want = f'(B,3,{size[0]},{size[1]})' if size is not None else f'(B,3,H,W), H, W multiples of {self.stride}'
            raise ValueError(f'DiffTSRModel: lq must be {want} (sampler.input_size), got {tuple(lq.shape)}')
        if lq.min() < -1e-3 or lq.max() > 1 + 1e-3:
            raise ValueError(f'DiffTSRModel: lq must be RGB in [0, 1], got range [{lq.min():.3f}, {lq.max():.3f}]')
        self.lq = lq.to(self.device)
        if 'gt' in data:
            self.gt = data['gt'].to(self.device)

    @torch.no_grad()
    def test(self):
        seed = self.sampler_opt['seed']
        generator = None if seed is None else torch.Generator(device=self.device).manual_seed(int(seed))
        ids, probs = self.net_ocr.greedy_decode(self.lq)
        self.text_prior, _ = transocr_to_idm(ids, probs)
        self.output = difftsr_sample(self.net_idm, self.net_vae, self.net_mom, self.lq, self.text_prior,
                                     self.scheduler, eta=float(self.sampler_opt['eta']), generator=generator,
                                     posterior=self.sampler_opt['posterior'])

    def save(self, epoch, current_iter):
        raise NotImplementedError('DiffTSRModel is test-only; nothing to save')
