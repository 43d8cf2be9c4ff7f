"""Our modules, loaded through the real loader from official-layout weights, reproduce the OFFICIAL DiffTSR
code's outputs (arrays in tests/data/backbone/, made by make_backbone_fixtures.py), within float32 rounding."""
import copy

import pytest
import torch

from tola_plugin.archs.backbone_builder import load_difftsr
from tola_plugin.archs.difftsr_arch import difftsr_sample
from tola_plugin.archs.diffusion_schedule import make_ldm_scheduler
from backbone_testing import official_fixture, single_thread, write_tiny_official_ckpt
from numerics import abs_err, equivalent, rel_err, within

# Ours (float32) vs the official code's float32 outputs on the same inputs: the largest error measured over the
# AVX-512, AVX2 and generic kernels on an Intel and two AMD CPUs (docs/testing.md) is 2.7e-6 (VAE decoder with AVX2,
# and the 200-step route's z0, whose first DDIM step multiplies the IDM's rounding by up to 101.6 at t = 999), so
# 3e-4 keeps 110x; a wrong layer is >1e-2 off.
TOL = 3e-4

pytestmark = pytest.mark.numerics
_one_thread = pytest.fixture(scope='module', autouse=True)(single_thread)


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    meta, arrays = official_fixture()
    path = write_tiny_official_ckpt(tmp_path_factory.mktemp('eq') / 'DiffTSR.ckpt', meta)
    return load_difftsr(path, configs=meta['ours']), arrays, meta


@torch.no_grad()
def test_idm_matches_official(setup):
    nets, a, _ = setup
    eps = nets['idm'](a['idm.x'], a['idm.t'], a['idm.context'])
    within(rel_err(eps, a['idm.eps']), TOL, 'IDM eps')


@torch.no_grad()
def test_vae_matches_official(setup):
    nets, a, _ = setup
    dist = nets['vae'].encode(a['vae.image']).latent_dist
    within(rel_err(dist.mean, a['vae.mean']), TOL, 'VAE posterior mean')
    within(rel_err(dist.logvar, a['vae.logvar']), TOL, 'VAE posterior log-variance')
    within(rel_err(nets['vae'].decode(a['vae.z']).sample, a['vae.decoded']), TOL, 'VAE decoder')


@torch.no_grad()
def test_mom_matches_official(setup):
    nets, a, _ = setup
    i_cond, c_cond = nets['mom'](a['mom.c_t'], a['mom.z_lr'], a['mom.z_t'], a['mom.t'])
    within(rel_err(i_cond, a['mom.i_cond']), TOL, 'MoM I_cond')
    within(rel_err(c_cond, a['mom.c_cond']), TOL, 'MoM C_cond')
    assert torch.equal(nets['mom'].encode_text(a['mom.c_t']), c_cond)


@torch.no_grad()
def test_token_weights(setup):
    """Weights of 1 reproduce the official C_cond; a weight scales that token's embedding before the
    position embedding is added."""
    nets, a, _ = setup
    enc = nets['mom'].text_encoder
    tokens = a['mom.c_t']
    within(rel_err(enc(tokens, torch.ones(tokens.shape)), a['mom.c_cond']), TOL, 'unit token weights')
    weights = torch.rand(tokens.shape, generator=torch.Generator().manual_seed(0))
    assert abs_err(enc(tokens, weights), a['mom.c_cond']) > 1e-3
    with pytest.raises(ValueError, match='token_weights'):
        enc(tokens, weights[:, :3])
    enc64, weights = copy.deepcopy(enc).double(), weights.double()  # the same function written out, in float64
    x = enc64.token_emb(tokens) * weights[..., None] + enc64.pos_emb.weight[:tokens.shape[1]]
    for block in enc64.blocks:
        x = block(x)
    equivalent(enc64(tokens, weights), enc64.norm(x), 'weighted tokens vs by hand')


@torch.no_grad()
def test_whole_route_matches_official(setup):
    """Tiny route, fixed tokens in place of TransOCR, noise from the same seed: z_0, the decoded image and
    the final uint8 image equal the official DiffTSR_sample's."""
    nets, a, meta = setup
    lq = torch.from_numpy(a['route.lq_uint8'].numpy() / 255.0).float().permute(2, 0, 1)[None]  # official cast
    seen = {}
    decode = nets['vae'].decode

    def spy(z, **kwargs):
        seen['z'], out = z, decode(z, **kwargs)
        seen['decoded'] = out.sample
        return out

    nets['vae'].decode = spy
    try:
        out = difftsr_sample(nets['idm'], nets['vae'], nets['mom'], lq, a['route.tokens'],
                             make_ldm_scheduler('ddim', meta['route_steps']), eta=meta['route_eta'],
                             generator=torch.Generator().manual_seed(meta['route_seed']))
    finally:
        nets['vae'].decode = decode
    within(rel_err(seen['z'], a['route.z0_unscaled']), TOL, 'route z0')
    within(rel_err(seen['decoded'], a['route.decoded']), TOL, 'route decoded image')
    ours_uint8 = (out[0].permute(1, 2, 0) * 255).numpy().astype('uint8')  # official: clamp, *255, astype
    # the decoded image is within TOL of the official one (3e-4 of [0, 1] is 0.08 of a grey level), but truncation
    # to uint8 may still cross one boundary: at most one level (measured 1)
    assert abs_err(torch.from_numpy(ours_uint8).int(), a['route.out_uint8'].int()) <= 1


@torch.no_grad()
def test_route_seed_and_latent_modes(setup):
    nets, a, _ = setup
    lq = torch.rand(1, 3, 32, 128, generator=torch.Generator().manual_seed(1))
    sched = make_ldm_scheduler('ddim', 3)

    def run(seed, latent='sample'):
        return difftsr_sample(nets['idm'], nets['vae'], nets['mom'], lq, a['route.tokens'], sched, 0.2,
                              torch.Generator().manual_seed(seed), latent)

    first = run(0)
    assert first.shape == lq.shape and 0 <= first.min() and first.max() <= 1
    assert torch.equal(first, run(0))
    assert not torch.equal(first, run(1))
    assert not torch.equal(run(0, 'mode'), first)
    with pytest.raises(ValueError, match='latent'):
        run(0, 'median')


def test_idm_gradient_checkpointing_gives_same_gradients(setup):
    """The swapped-in ResBlock samplers honour diffusers' gradient checkpointing (TOLA trains through the IDM)."""
    nets, a, _ = setup
    idm = copy.deepcopy(nets['idm']).double()  # recomputation is equal in exact arithmetic: compared in float64
    x, context = a['idm.x'][:1].double(), a['idm.context'][:1].double()

    def grad():
        idm.zero_grad()
        idm(x, a['idm.t'][:1], context).square().mean().backward()
        return {k: p.grad.clone() for k, p in idm.named_parameters() if 'samplers' in k and p.grad is not None}

    plain = grad()
    idm.enable_gradient_checkpointing()
    idm.train()
    ckpt = grad()
    assert plain and plain.keys() == ckpt.keys()
    flat = [torch.cat([grads[k].flatten() for k in plain]) for grads in (ckpt, plain)]
    equivalent(*flat, 'checkpointed vs plain gradients')
