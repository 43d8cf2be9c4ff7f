"""The inference path on a tiny random backbone: the default path computes the reference route's function, and
``load_for_inference`` / ``prepare_for_inference`` give an inference-only network."""
import copy

import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs.tola_arch import TOLANet
from numerics import EXACT_TOL, assert_clear_argmax, equivalent
from tola_testing import one_thread, tiny_net_opt  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')
SEEDS = [3, 4]
# The default path and the reference route (merged vs unmerged LoRA, cached vs full-prefix TransOCR decoding) are
# equal in exact arithmetic: the network, its merged file and the inputs are float64 (docs/testing.md).


@pytest.fixture(scope='module')
def adapted():
    """A tiny TOLANet whose LoRA and LRC carry non-zero values (at init both add exact zeros), on the reference
    route (the whole prefix re-decoded for 24 steps, LoRA unmerged), in float64."""
    torch.manual_seed(0)
    net = TOLANet(**tiny_net_opt(text_decoding='full_prefix')).double().eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in net.parameters():
            if param.requires_grad:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
        # spread the tiny recognizer's scores so that its greedy ids are clear choices on every CPU
        net.transocr.generator_word.proj.weight.mul_(40.0)
    return net


@pytest.fixture(scope='module')
def merged_file(adapted, tmp_path_factory):
    path = str(tmp_path_factory.mktemp('merged') / 'tiny_merged.safetensors')
    copy.deepcopy(adapted).save_merged(path)
    return path


@pytest.fixture(scope='module')
def lq():
    torch.manual_seed(2)
    return torch.rand(2, 3, 32, 128, dtype=torch.float64)


@pytest.mark.numerics
def test_default_path_equals_the_reference_route(adapted, merged_file, lq):
    with torch.no_grad():
        ref = adapted(lq, noise_seeds=SEEDS, return_intermediates=True)
        ids = adapted.transocr.greedy_decode(lq, max_steps=24, incremental=False)[0]
        logits = adapted.transocr(lq, ids)  # the scores of every step the prior reads
    net = TOLANet.load_for_inference(merged_file, text_decoding='incremental')
    out = net(lq, noise_seeds=SEEDS, return_intermediates=True)
    assert_clear_argmax(logits[:, :23], EXACT_TOL * float(logits.abs().max()), 'tiny TransOCR steps')
    assert torch.equal(out['tokens'], ref['tokens']) and out['prior_texts'] == ref['prior_texts']
    assert any(ref['prior_texts']), 'the prior should hold text'
    equivalent(out['confidences'], ref['confidences'], 'default vs reference confidences')
    equivalent(out['image'], ref['image'], 'default vs reference image')
    assert torch.count_nonzero(out['delta_r']) > 0  # the LRC is active


@pytest.mark.numerics
def test_prepare_for_inference_equals_loading_the_merged_file(adapted, merged_file, lq):
    net = copy.deepcopy(adapted)
    net.text_decoding = 'incremental'
    assert net.prepare_for_inference() is net
    assert not net.has_lora('idm') and not net.has_lora('vae')
    loaded = TOLANet.load_for_inference(merged_file)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), loaded.state_dict().values()))
    # the same weights and operations; memory-mapped weights sit at other addresses, where kernels may sum in
    # another order
    equivalent(net(lq, noise_seeds=SEEDS), loaded(lq, noise_seeds=SEEDS), 'prepared vs loaded image')


def test_inference_network_is_inference_only(merged_file, lq):
    net = TOLANet.load_for_inference(merged_file, precision='fp32', timestep=949)
    assert net.timestep == 949 and net.inference_only and not net.training
    # the MoM image branch (feeds only the TDM) is neither loaded nor in the state
    assert net.mom.unet is None and net.mom.token_embedder is None
    assert not any(k.startswith(('mom.unet.', 'mom.token_embedder.')) for k in net.state_dict())
    assert not any(p.requires_grad for p in net.parameters())
    out = net(lq, noise_seeds=SEEDS, return_intermediates=True)
    assert out['z0'].is_inference() and not out['image'].requires_grad  # ran under torch.inference_mode
    with pytest.raises(RuntimeError, match='prepared for inference'):
        net.train()
    with pytest.raises(ValueError, match='cannot be exported'):
        net.save_merged(merged_file + '.again')
    with pytest.raises(RuntimeError, match='image branch was dropped'):
        net.mom(out['tokens'], out['z_lr'], out['z_t'], torch.tensor([999, 999]))
    with pytest.raises(ValueError, match='cannot be switched on a built network'):
        TOLANet.load_for_inference(merged_file, lrc=None)
