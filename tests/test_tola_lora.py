"""peft LoRA placement: the paper's counts on full-size modules built on the meta device (no memory)."""
import pytest
import torch
from peft import PeftModel

import tola_plugin  # noqa: F401
from tola_plugin.archs.idm_unet_arch import DiffTSRIDMUNet
from tola_plugin.archs.lora import IDM_LORA_TARGETS, VAE_ENCODER_LORA_TARGETS, add_lora, count_lora_parameters
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.archs.vae_arch import DiffTSRVAE


def _meta(cls):
    with torch.device('meta'):
        return cls()


def test_paper_counts_at_rank4():
    idm = add_lora(_meta(DiffTSRIDMUNet), IDM_LORA_TARGETS, rank=4)
    vae = add_lora(_meta(DiffTSRVAE), VAE_ENCODER_LORA_TARGETS, rank=4)
    assert count_lora_parameters(idm) == 2_027_520
    assert count_lora_parameters(vae) == 250_548
    assert sum(p.numel() for p in idm.parameters() if p.requires_grad) == 2_027_520
    assert sum(p.numel() for p in vae.parameters() if p.requires_grad) == 250_548
    for model in (idm, vae):  # paper: (r, alpha) = (4, 4), zero dropout
        config = model.peft_config['default']
        assert (config.r, config.lora_alpha, config.lora_dropout) == (4, 4, 0.0)


def test_placement_is_the_papers():
    idm = add_lora(_meta(DiffTSRIDMUNet), IDM_LORA_TARGETS, rank=4)
    adapted = {n.rsplit('.lora_A', 1)[0] for n, _ in idm.named_parameters() if '.lora_A.' in n}
    assert len(adapted) == 16 * 12  # 12 layers in each of the 16 transformer blocks
    assert all('.attentions.' in n for n in adapted)
    assert not any(k in n for n in adapted for k in ('conv_in', 'conv_out', 'resnets', 'time_embedding'))
    vae = add_lora(_meta(DiffTSRVAE), VAE_ENCODER_LORA_TARGETS, rank=4)
    adapted = {n.rsplit('.lora_A', 1)[0] for n, _ in vae.named_parameters() if '.lora_A.' in n}
    assert len(adapted) == 23
    assert any(n.endswith('.quant_conv') for n in adapted)
    assert not any('decoder' in n or 'post_quant_conv' in n or 'attentions' in n for n in adapted)


@pytest.mark.parametrize('rank', [2, 8])
def test_rank_option_scales_counts(rank):
    assert count_lora_parameters(add_lora(_meta(DiffTSRIDMUNet), IDM_LORA_TARGETS, rank)) == 2_027_520 * rank // 4
    assert count_lora_parameters(add_lora(_meta(DiffTSRVAE), VAE_ENCODER_LORA_TARGETS, rank)) == 250_548 * rank // 4


def test_full_size_tolanet_trains_exactly_the_adaptation_state():
    with torch.device('meta'):
        net = TOLANet(backbone_init='random', lrc=dict(type='LatentResidualCorrection'))
    counts = net.trainable_parameter_counts()
    assert counts == {'idm_lora': 2_027_520, 'vae_lora': 250_548, 'lrc': 180_323, 'total': 2_458_391}
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == 2_458_391
    assert isinstance(net.idm, PeftModel) and isinstance(net.vae, PeftModel)
    state = net.adaptation_state_dict()
    assert sum(v.numel() for v in state.values()) == 2_458_391


def test_lora_rejects_bad_rank_and_unmatched_targets():
    with pytest.raises(ValueError, match='rank must be a positive integer') as err:
        add_lora(torch.nn.Linear(2, 2), IDM_LORA_TARGETS, rank=0)
    assert 'matches' not in str(err.value)  # a bad rank is not reported as "no module matches"
    with pytest.raises(ValueError, match='matches'):
        add_lora(torch.nn.Sequential(torch.nn.Linear(2, 2)), IDM_LORA_TARGETS, rank=4)
