"""The IDM schedule and the DDIM sampler come from diffusers and equal LDM's (docs/backbone.md, "Schedule and
sampler")."""
import numpy as np
import pytest
import torch

from tola_plugin.archs.diffusion_schedule import alphas_cumprod, make_ldm_scheduler
from numerics import rel_err, within


def ldm_alphas_cumprod_float64():
    # LDM make_beta_schedule('linear'): linspace on sqrt(beta), float64 (reference for the test only)
    betas = np.linspace(0.0015**0.5, 0.0205**0.5, 1000, dtype=np.float64)**2
    return np.cumprod(1.0 - betas)


@pytest.mark.numerics
def test_schedule_constants():
    ac = alphas_cumprod()
    assert ac.shape == (1000, )
    # constants as printed in the paper / LDM (4-5 significant digits): the tolerance is their printed precision
    assert ac[999].item() == pytest.approx(9.691e-5, rel=1e-4)
    assert ac[999].sqrt().item() == pytest.approx(0.009844, rel=1e-4)
    assert ac[0].item() == pytest.approx(0.9985, rel=1e-7)
    assert ac[500].item() == pytest.approx(0.10768, rel=1e-4)
    assert ac[996].item() == pytest.approx(1.0311e-4, rel=1e-4)
    # diffusers accumulates the product in float32, LDM in float64: measured 5.7e-7 relative at worst (the same on
    # every kernel set of both vendors), tolerance 1e-4 (175x); a wrong beta schedule is >1e-2 off
    ref = torch.from_numpy(ldm_alphas_cumprod_float64())
    within(float(((ac.double() - ref).abs() / ref).max()), 1e-4, 'alphas_cumprod vs float64')


def test_ddim_200_timesteps_and_final_alpha():
    sched = make_ldm_scheduler('ddim', 200)
    assert sched.timesteps.tolist() == list(range(996, 0, -5))
    assert len(sched.timesteps) == 200
    # the last step's "previous" alphabar is alphabar_0 (set_alpha_to_one=False), not 1
    assert sched.final_alpha_cumprod.item() == pytest.approx(0.9985, rel=1e-7)


def ldm_ddim_step(x, eps, a_t, a_prev, eta, noise):
    sigma = eta * np.sqrt((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev))
    pred_x0 = (x - np.sqrt(1 - a_t) * eps) / np.sqrt(a_t)
    return np.sqrt(a_prev) * pred_x0 + np.sqrt(1 - a_prev - sigma**2) * eps + sigma * noise, sigma


@pytest.mark.numerics
@pytest.mark.parametrize('t', [996, 501, 6, 1])
def test_ddim_step_equals_ldm_update(t):
    """diffusers' DDIM step with eta 0.2 is LDM's p_sample_ddim update (incl. sigma) to float32 rounding."""
    sched = make_ldm_scheduler('ddim', 200)
    ac = ldm_alphas_cumprod_float64()
    a_t, a_prev = ac[t], ac[t - 5] if t - 5 >= 0 else ac[0]
    g = torch.Generator().manual_seed(t)
    x, eps, noise = (torch.randn(1, 3, 4, 8, generator=g) for _ in range(3))
    ours = sched.step(eps, t, x, eta=0.2, variance_noise=noise).prev_sample
    ref, sigma = ldm_ddim_step(x.double().numpy(), eps.double().numpy(), a_t, a_prev, 0.2, noise.double().numpy())
    ref = torch.from_numpy(ref)
    # float32 step vs the float64 update (its x0 prediction multiplies eps's rounding by up to 101.6 at t = 996):
    # measured 1.9e-7 at worst (t = 6, generic kernels), tolerance 3e-5 (155x); a wrong sigma or alpha is >1e-3 off
    within(rel_err(ours, ref), 3e-5, 'DDIM step vs float64')
    if t == 996:  # sigma as printed to 3-4 digits
        assert sigma == pytest.approx(0.0625, abs=1e-4)
    if t == 1:
        assert sigma == pytest.approx(0.0055, abs=1e-4)


def test_q_sample_at_999():
    sched = make_ldm_scheduler('ddim', 200)
    z, noise = torch.ones(1, 3, 2, 2), torch.zeros(1, 3, 2, 2)
    out = sched.add_noise(z, noise, torch.tensor([999]))
    assert out.flatten()[0].item() == pytest.approx(0.009844, rel=1e-4)  # sqrt(alphabar_999) to its printed digits


def test_bad_scheduler_arguments():
    with pytest.raises(ValueError, match='kind'):
        make_ldm_scheduler('euler')
    with pytest.raises(ValueError, match='num_inference_steps'):
        make_ldm_scheduler('ddim', 0)
