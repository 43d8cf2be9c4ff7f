"""Our modules, loaded through the real loader from official-layout weights, reproduce the OFFICIAL DiffTSR
code's outputs (arrays in tests/data/backbone/, made by make_backbone_fixtures.py): rel. error <= 1e-5."""
import pytest
import torch

from tola_plugin.models.difftsr_model import difftsr_sample
from tola_plugin.utils.difftsr_checkpoint import load_difftsr
from tola_plugin.utils.diffusion_schedule import make_ldm_scheduler

from backbone_testing import official_fixture, rel_err, single_thread, write_tiny_official_ckpt

TOL = 1e-5

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
    assert rel_err(eps, a['idm.eps']) <= TOL


@torch.no_grad()
def test_vae_matches_official(setup):
    nets, a, _ = setup
    dist = nets['vae'].encode(a['vae.image']).latent_dist
    assert rel_err(dist.mean, a['vae.mean']) <= TOL
    assert rel_err(dist.logvar, a['vae.logvar']) <= TOL
    assert rel_err(nets['vae'].decode(a['vae.z']).sample, a['vae.decoded']) <= TOL


@torch.no_grad()
def test_mom_matches_official(setup):
    nets, a, _ = setup
    i_cond, c_cond = nets['mom'](a['mom.c_t'], a['mom.z_lr'], a['mom.z_t'], a['mom.t'])
    assert rel_err(i_cond, a['mom.i_cond']) <= TOL
    assert rel_err(c_cond, a['mom.c_cond']) <= TOL
    assert torch.equal(nets['mom'].encode_text(a['mom.c_t']), c_cond)


@torch.no_grad()
def test_token_weights(setup):
    """Weights of 1 reproduce the official C_cond; a weight scales that token's embedding before the
    position embedding is added."""
    nets, a, _ = setup
    enc = nets['mom'].text_encoder
    tokens = a['mom.c_t']
    assert rel_err(enc(tokens, torch.ones(tokens.shape)), a['mom.c_cond']) <= TOL
    weights = torch.rand(tokens.shape, generator=torch.Generator().manual_seed(0))
    x = enc.token_emb(tokens) * weights[..., None] + enc.pos_emb.weight[:tokens.shape[1]]
    for block in enc.blocks:
        x = block(x)
    assert torch.allclose(enc(tokens, weights), enc.norm(x), atol=1e-6)
    assert not torch.allclose(enc(tokens, weights), a['mom.c_cond'], atol=1e-3)
    with pytest.raises(ValueError, match='token_weights'):
        enc(tokens, weights[:, :3])


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
    assert rel_err(seen['z'], a['route.z0_unscaled']) <= TOL
    assert rel_err(seen['decoded'], a['route.decoded']) <= TOL
    ours_uint8 = (out[0].permute(1, 2, 0) * 255).numpy().astype('uint8')  # official: clamp, *255, astype
    assert (torch.from_numpy(ours_uint8).int() - a['route.out_uint8'].int()).abs().max() <= 1


@torch.no_grad()
def test_route_seed_and_posterior_modes(setup):
    nets, a, _ = setup
    lq = torch.rand(1, 3, 32, 128, generator=torch.Generator().manual_seed(1))
    sched = make_ldm_scheduler('ddim', 3)

    def run(seed, posterior='sample'):
        return difftsr_sample(nets['idm'], nets['vae'], nets['mom'], lq, a['route.tokens'], sched, 0.2,
                              torch.Generator().manual_seed(seed), posterior)

    first = run(0)
    assert first.shape == lq.shape and 0 <= first.min() and first.max() <= 1
    assert torch.equal(first, run(0))
    assert not torch.equal(first, run(1))
    assert not torch.equal(run(0, 'mean'), first)
    with pytest.raises(ValueError, match='posterior'):
        run(0, 'median')


def test_idm_gradient_checkpointing_gives_same_gradients(setup):
    """The swapped-in ResBlock samplers honour diffusers' gradient checkpointing (TOLA trains through the IDM)."""
    nets, a, _ = setup
    idm = nets['idm']
    x = a['idm.x'][:1]

    def grad():
        idm.zero_grad()
        idm(x, a['idm.t'][:1], a['idm.context'][:1]).square().mean().backward()
        return {k: p.grad.clone() for k, p in idm.named_parameters() if 'samplers' in k and p.grad is not None}

    plain = grad()
    idm.enable_gradient_checkpointing()
    try:
        idm.train()
        ckpt = grad()
    finally:
        idm.disable_gradient_checkpointing()
        idm.eval()
        idm.zero_grad(set_to_none=True)
    assert plain and plain.keys() == ckpt.keys()
    assert all(torch.allclose(plain[k], ckpt[k], rtol=1e-4, atol=1e-7) for k in plain)
