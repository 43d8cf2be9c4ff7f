"""TOLANet on a tiny random backbone: Algorithm 1 line by line, the switches, merging, adaptation state."""
import math

import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs.diffusion_schedule import schedule_constants
from tola_plugin.archs.tola_arch import TOLANet, image_noise_seed
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.text.alphabets import IDM_PAD, decode_idm
from tola_plugin.text.text_prior import transocr_to_idm
from numerics import equivalent
from tola_testing import one_thread, tiny_net_opt  # noqa: F401

H, W = 32, 128  # tiny images keep the tests fast; the full-size forward has its own test
# Nets and inputs are float64: the equivalence checks below compare two routes that are equal in exact arithmetic
# (docs/testing.md), and the other tests do not depend on the dtype.

pytestmark = pytest.mark.usefixtures('one_thread')


def make_net(seed=0, **overrides):
    torch.manual_seed(seed)
    return TOLANet(**tiny_net_opt(**overrides)).double()


@pytest.fixture(scope='module')
def net():
    return make_net()


@pytest.fixture(scope='module')
def lq():
    torch.manual_seed(1)
    return torch.rand(2, 3, H, W, dtype=torch.float64)


def perturb_adapters(net, seed=3):
    """Give LoRA B and the LRC output non-zero values so that the adaptation actually changes outputs."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if '.lora_B.' in name or name.startswith('lrc.conv_out'):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)


@pytest.mark.numerics
def test_schedule_constants_match_spec():
    sa, s1m = schedule_constants(999)
    # float64 on both sides (LDM's numpy schedule): 1e-7 is ~1e8x float64 rounding
    assert math.isclose(sa**2, 9.691086681147455e-05, rel_tol=1e-7)
    # its float32 rounding, as the official float32 buffer holds it (an exact value: one rounding of a float64)
    assert torch.tensor(sa, dtype=torch.float32).item() == pytest.approx(0.009844332, abs=1e-9)
    assert math.isclose(sa**2 + s1m**2, 1.0, rel_tol=1e-12)
    with pytest.raises(ValueError, match='timestep'):
        schedule_constants(1000)


@pytest.mark.numerics
def test_algorithm1_line_by_line_at_init(net, lq):
    """With LoRA and LRC at init, eps = 0 and the posterior mode, the forward is the frozen DiffTSR modules run
    through Algorithm 1 (computed here independently with the adapters disabled)."""
    net.eval()
    net.set_switches(noise='zero')
    try:
        with torch.no_grad():
            out = net(lq, return_intermediates=True)
            ids, probs = net.transocr.greedy_decode(lq, max_steps=24)
            tokens, conf = transocr_to_idm(ids, probs)
            with net.vae.disable_adapter():
                z_lr = net.vae.encode(lq).latent_dist.mode()
            sa, s1m = schedule_constants(999)
            z_t = sa * z_lr  # eps = 0
            context = net.mom.encode_text(tokens, token_weights=conf)
            with net.idm.disable_adapter():
                eps_hat = net.idm(torch.cat([z_t, z_lr], 1), torch.full((2, ), 999), context)
            z0 = (z_t - s1m * eps_hat) / sa
            with net.vae.disable_adapter():
                image = net.vae.decode(z0 * (1.0 / LATENT_SCALE)).sample.clamp(0, 1)
    finally:
        net.set_switches(noise='gaussian')
    assert torch.equal(out['tokens'], tokens) and torch.equal(out['confidences'], conf)
    assert torch.equal(out['z_lr'], z_lr)
    assert torch.equal(out['eps'], torch.zeros_like(z_lr))
    assert torch.equal(out['eps_hat'], eps_hat)
    assert torch.equal(out['z0'], z0)
    assert torch.count_nonzero(out['delta_r']) == 0
    # z_LR - (r + Δr) with Δr = 0 is z0 up to the rounding of z_LR - r, and the image decodes z0_corr instead of z0
    equivalent(out['z0_corr'], out['z0'], 'z0_corr vs z0 at init')
    equivalent(out['image'], image, 'image vs the adapter-free route')


def test_qsample_and_clean_latent_formulas(net, lq):
    net.eval()
    with torch.no_grad():
        out = net(lq, noise_seeds=[5, 6], return_intermediates=True)
    sa, s1m = schedule_constants(999)
    assert torch.equal(out['z_t'], sa * out['z_lr'] + s1m * out['eps'])
    assert torch.equal(out['z0'], (out['z_t'] - s1m * out['eps_hat']) / sa)
    assert torch.equal(out['r'], out['z_lr'] - out['z0'])
    assert out['image'].min() >= 0 and out['image'].max() <= 1 and out['image'].shape == lq.shape


def test_noise_is_seedable_per_image(net, lq):
    net.eval()
    with torch.no_grad():
        a = net(lq, noise_seeds=[11, 12], return_intermediates=True)['eps']
        b = net(lq.flip(0), noise_seeds=[12, 11], return_intermediates=True)['eps']
        c = net(lq[:1], noise_seeds=[11], return_intermediates=True)['eps']
    assert torch.equal(a, b.flip(0)) and torch.equal(a[:1], c)
    assert not torch.equal(a[0], a[1])
    assert image_noise_seed('x.png') == image_noise_seed('x.png') != image_noise_seed('y.png')
    with pytest.raises(ValueError, match='noise seeds'):
        net(lq, noise_seeds=[1])


def test_text_prior_switches(lq):
    gt = torch.full((2, 24), IDM_PAD, dtype=torch.long)
    gt[:, :3] = torch.tensor([10, 20, 30])
    net = make_net(text_prior='gt')
    with pytest.raises(ValueError, match='gt_tokens'):
        net(lq)
    tokens, conf, texts = net.predict_text_prior(lq, gt)
    assert torch.equal(tokens, gt) and conf.tolist()[0] == [1.0] * 3 + [0.0] * 21
    assert texts == [decode_idm([10, 20, 30])] * 2

    net.text_prior = 'null'
    tokens, conf, _ = net.predict_text_prior(lq)
    assert (tokens == IDM_PAD).all() and (conf == 0).all()

    net.text_prior, net.confidence = 'predicted', 'uniform'
    tokens, conf, _ = net.predict_text_prior(lq)
    assert conf is None and tokens.shape == (2, 24)
    assert torch.equal(net.text_context(tokens, conf, 2, lq), net.mom.encode_text(tokens, None))

    net.confidence, net.context_route = 'predicted', 'direct'
    tokens, conf, _ = net.predict_text_prior(lq)
    expected = net.mom.text_encoder.token_emb(tokens) * conf.unsqueeze(-1)
    assert torch.equal(net.text_context(tokens, conf, 2, lq), expected)


def test_no_mom_removes_the_text_branch(lq):
    net = make_net(text_prior='none')

    def fail(*args, **kwargs):
        raise AssertionError('TransOCR/MoM must not run without the text branch')

    net.transocr.greedy_decode = fail
    net.mom.encode_text = fail
    out = net(lq, return_intermediates=True)
    assert out['tokens'] is None and out['image'].shape == lq.shape
    assert torch.count_nonzero(net.text_context(None, None, 2, lq)) == 0


def test_bad_options_raise():
    with pytest.raises(ValueError, match='text_prior'):
        TOLANet(**tiny_net_opt(text_prior='oracle'))
    with pytest.raises(ValueError, match='direct'):
        TOLANet(**tiny_net_opt(text_prior='none', context_route='direct'))
    with pytest.raises(FileNotFoundError):
        TOLANet(backbone_init='checkpoint', difftsr_checkpoint='/nonexistent/DiffTSR.ckpt')


def test_train_mode_keeps_frozen_modules_in_eval(net):
    net.train()
    assert net.training and net.lrc.training
    assert not net.transocr.training and not net.mom.training and not net.idm.training and not net.vae.training
    trainable = {n for n, p in net.named_parameters() if p.requires_grad}
    assert trainable and all('.lora_' in n or n.startswith('lrc.') for n in trainable)
    net.eval()
    assert not net.lrc.training


def test_lora_only_variant_has_no_correction(lq):
    net = make_net(lrc=None)
    out = net(lq, return_intermediates=True)
    assert out['delta_r'] is None and out['z0_corr'] is out['z0']
    assert net.trainable_parameter_counts()['lrc'] == 0


@pytest.mark.numerics
def test_merged_and_unmerged_agree(lq):
    net = make_net()
    perturb_adapters(net)
    net.eval()
    with torch.no_grad():
        before = net(lq, noise_seeds=[1, 2], return_intermediates=True)
        net.merge_lora()
        after = net(lq, noise_seeds=[1, 2], return_intermediates=True)
    assert not net.has_lora('idm') and not net.has_lora('vae')
    assert not any('lora_' in n for n, _ in net.named_parameters())
    for key in ('z_lr', 'z0', 'z0_corr', 'image'):  # W + s·BA folded into W: only the weights' rounding differs
        equivalent(after[key], before[key], f'merged vs unmerged {key}')


def test_vae_lora_off_uses_the_base_encoder(lq):
    on, off = make_net(), make_net(vae_lora_active=False)
    perturb_adapters(on)
    off.load_adaptation_state_dict(on.adaptation_state_dict())
    on.eval(), off.eval()
    with torch.no_grad():
        z_on = on(lq, noise_seeds=[1, 2], return_intermediates=True)['z_lr']
        z_off = off(lq, noise_seeds=[1, 2], return_intermediates=True)['z_lr']
        with on.vae.disable_adapter():
            z_base = on.vae.encode(lq).latent_dist.mode()
        off.merge_lora()  # unloads the disabled VAE LoRA instead of merging it
        z_off_merged = off(lq, noise_seeds=[1, 2], return_intermediates=True)['z_lr']
    assert not torch.equal(z_on, z_off)
    assert torch.equal(z_off, z_base) and torch.equal(z_off_merged, z_base)


def test_adaptation_state_round_trip_and_strictness(lq):
    src = make_net(seed=0)
    perturb_adapters(src)
    state = src.adaptation_state_dict()
    assert {k.split('.')[0] for k in state} == {'idm_lora', 'vae_lora', 'lrc'}
    assert sum(v.numel() for v in state.values()) == src.trainable_parameter_counts()['total']
    assert all(('lora_' in k) or k.startswith('lrc.') for k in state)
    dst = make_net(seed=0)  # same random backbone, fresh adapters
    dst.load_adaptation_state_dict(state)
    src.eval(), dst.eval()
    with torch.no_grad():
        assert torch.equal(src(lq, noise_seeds=[1, 2]), dst(lq, noise_seeds=[1, 2]))
    missing = dict(state)
    missing.pop(next(k for k in state if k.startswith('idm_lora.')))
    with pytest.raises(KeyError, match='missing'):
        dst.load_adaptation_state_dict(missing)
    with pytest.raises(KeyError, match='unexpected'):
        dst.load_adaptation_state_dict(dict(state, **{'backbone.weight': torch.zeros(1)}))
    with pytest.raises(KeyError, match='no idm LoRA'):
        make_net(idm_lora=False).load_adaptation_state_dict(state)


def test_posterior_sample_option_is_seeded_per_image(lq):
    net = make_net(latent='sample').eval()
    with torch.no_grad():
        a = net(lq, noise_seeds=[1, 2], return_intermediates=True)
        b = net(lq, noise_seeds=[1, 2], return_intermediates=True)
        c = net(lq, noise_seeds=[1, 3], return_intermediates=True)
        with net.vae.disable_adapter():
            mean = net.vae.encode(lq).latent_dist.mode()
    assert torch.equal(a['z_lr'], b['z_lr']) and torch.equal(a['z_lr'][0], c['z_lr'][0])
    assert not torch.equal(a['z_lr'], mean) and not torch.equal(a['z_lr'][1], c['z_lr'][1])
