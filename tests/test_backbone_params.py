"""Parameter and state-dict counts at full size (built on the meta device: nothing is allocated)."""
import torch

from tola_plugin.archs.idm_unet_arch import DiffTSRIDMUNet
from tola_plugin.archs.mom_arch import DiffTSRMoM
from tola_plugin.archs.vae_arch import LATENT_SCALE, DiffTSRVAE
from backbone_testing import manifest


def count(module):
    return sum(p.numel() for p in module.parameters())


def test_idm_full_size_counts():
    with torch.device('meta'):
        idm = DiffTSRIDMUNet()
    assert count(idm) == 874_024_003
    assert len(idm.state_dict()) == len(manifest('idm')) == 736
    assert not list(idm.buffers())


def test_vae_full_size_counts():
    with torch.device('meta'):
        vae = DiffTSRVAE()
    assert count(vae) == 55_312_063
    assert count(vae.encoder) == 22_351_238
    assert count(vae.decoder) == 32_960_771
    assert len(vae.state_dict()) == len(manifest('vae')) == 204
    assert vae.config.scaling_factor == LATENT_SCALE == 0.18215


def test_mom_full_size_counts():
    with torch.device('meta'):
        mom = DiffTSRMoM()
    assert count(mom) == 6_226_675
    assert count(mom.token_embedder) == 862_208
    assert count(mom.unet) == 1_061_731
    assert count(mom.text_encoder) == 4_302_736
    assert len(mom.state_dict()) == len(manifest('mom')) == 249


def test_idm_has_resblock_samplers_at_attention_levels():
    """DiffTSR down/up-samples with time-conditioned ResBlocks, never with plain convs."""
    from diffusers.models.resnet import ResnetBlock2D
    with torch.device('meta'):
        idm = DiffTSRIDMUNet()
    samplers = [b.downsamplers[0] for b in idm.down_blocks if b.downsamplers is not None]
    samplers += [b.upsamplers[0] for b in idm.up_blocks if b.upsamplers is not None]
    assert len(samplers) == 6
    assert all(isinstance(s, ResnetBlock2D) and s.time_emb_proj is not None for s in samplers)
    assert sum(len(b.attentions) for b in idm.down_blocks if hasattr(b, 'attentions')) == 6
    assert sum(len(b.attentions) for b in idm.up_blocks if hasattr(b, 'attentions')) == 9


def test_idm_rejects_mismatched_attention_levels():
    import pytest
    with pytest.raises(ValueError, match='attention_levels'):
        DiffTSRIDMUNet(block_out_channels=(32, 64), attention_levels=(False, True, True))
