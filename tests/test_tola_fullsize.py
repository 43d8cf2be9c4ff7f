"""One full-size TOLANet forward (874M-parameter IDM, random weights) on a 128x512 image on CPU."""
import gc

import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs.tola_arch import TOLANet


def test_full_size_forward_128x512_cpu():
    torch.manual_seed(0)
    net = TOLANet(backbone_init='random', lrc=dict(type='LatentResidualCorrection')).eval()
    try:
        assert net.trainable_parameter_counts() == {'idm_lora': 2_027_520, 'vae_lora': 250_548, 'lrc': 180_323,
                                                    'total': 2_458_391}
        assert sum(p.numel() for p in net.idm.parameters() if not p.requires_grad) == 874_024_003
        lq = torch.rand(1, 3, 128, 512)
        with torch.no_grad():
            out = net(lq, noise_seeds=[0], return_intermediates=True)
        assert out['z_lr'].shape == out['z0'].shape == (1, 3, 32, 128)
        assert out['tokens'].shape == out['confidences'].shape == (1, 24)
        assert out['image'].shape == (1, 3, 128, 512)
        assert torch.isfinite(out['z0']).all() and torch.isfinite(out['image']).all()
        assert out['image'].min() >= 0 and out['image'].max() <= 1
        assert torch.count_nonzero(out['delta_r']) == 0
    finally:
        del net
        gc.collect()
