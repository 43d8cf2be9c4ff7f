"""DiffTSR's IDM noise schedule and DDIM sampler, taken from diffusers (never re-derived by hand).

LDM's "linear" schedule is ``linspace(sqrt(0.0015), sqrt(0.0205), 1000) ** 2``, which is diffusers'
``beta_schedule='scaled_linear'``. LDM's DDIM "uniform" discretisation with 200 steps visits
t = 996, 991, ..., 1 (``range(0, 1000, 5) + 1``) and uses alphabar_0 as the last "previous" value: that is
diffusers' ``timestep_spacing='leading', steps_offset=1, set_alpha_to_one=False``.
"""
from typing import Union

import torch
from diffusers import DDIMScheduler, DDPMScheduler

NUM_TRAIN_TIMESTEPS = 1000
BETA_START = 0.0015
BETA_END = 0.0205
#: Timestep at which DiffTSR noises z_LR to start sampling (``q_sample(z_LR, t=999)``).
START_TIMESTEP = NUM_TRAIN_TIMESTEPS - 1

_COMMON = dict(num_train_timesteps=NUM_TRAIN_TIMESTEPS, beta_start=BETA_START, beta_end=BETA_END,
               beta_schedule='scaled_linear', prediction_type='epsilon', clip_sample=False)


def make_ldm_scheduler(kind: str = 'ddim',
                       num_inference_steps: Union[int, None] = None) -> Union[DDIMScheduler, DDPMScheduler]:
    """diffusers scheduler reproducing DiffTSR's IDM schedule.

    Args:
        kind: 'ddim' (the sampler of the official inference) or 'ddpm' (training-time q_sample / add_noise).
        num_inference_steps: if given, ``set_timesteps`` is called (DDIM 200 -> 996, 991, ..., 1).
    """
    if kind == 'ddim':
        scheduler = DDIMScheduler(**_COMMON, set_alpha_to_one=False, steps_offset=1, timestep_spacing='leading')
    elif kind == 'ddpm':
        scheduler = DDPMScheduler(**_COMMON, variance_type='fixed_small', steps_offset=1, timestep_spacing='leading')
    else:
        raise ValueError(f"make_ldm_scheduler: kind must be 'ddim' or 'ddpm', got {kind!r}")
    if num_inference_steps is not None:
        if not 1 <= int(num_inference_steps) <= NUM_TRAIN_TIMESTEPS:
            raise ValueError(f'num_inference_steps must be in [1, {NUM_TRAIN_TIMESTEPS}], got {num_inference_steps}')
        scheduler.set_timesteps(int(num_inference_steps))
    return scheduler


def alphas_cumprod() -> torch.Tensor:
    """alphabar_t for t = 0..999, float32 (1000,), as diffusers computes it (alphabar_999 = 9.691e-5)."""
    return make_ldm_scheduler('ddpm').alphas_cumprod.clone()


def schedule_constants(timestep: int):
    """(√ᾱ_t, √(1-ᾱ_t)) as Python floats for the zero-indexed ``timestep``.

    ᾱ is accumulated in float64 from the diffusers scheduler's betas and the square roots are taken in
    float64, as LDM's numpy schedule does before its buffers are cast to float32; the float32 tensors they
    multiply round them exactly as the official float32 buffers are rounded.
    """
    if not 0 <= int(timestep) < NUM_TRAIN_TIMESTEPS:
        raise ValueError(f'timestep must be in [0, {NUM_TRAIN_TIMESTEPS - 1}], got {timestep!r}')
    with torch.device('cpu'):  # real numbers even when the network is being built on the meta device
        betas = make_ldm_scheduler('ddpm').betas.double()
        alpha_bar = torch.cumprod(1.0 - betas, 0)[int(timestep)]
    return float(alpha_bar.sqrt()), float((1.0 - alpha_bar).sqrt())
