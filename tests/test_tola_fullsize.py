"""Full size (874M-parameter IDM, random weights), 128x512 on CPU: the reference route and the default inference
path, one forward each, compute the same function."""
import gc

import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs.tola_arch import TOLANet
from numerics import assert_clear_argmax, rel_err, within

# Default path vs reference route at full size: merged vs unmerged LoRA and cached vs full-prefix decoding round
# differently, and t = 999 divides the IDM's rounding by sqrt(alpha_bar) = 0.0098; largest over the three kernel sets:
# image 4.1e-6 relative to max |ref|, confidences 2.1e-6
TOL = 1e-4


@pytest.mark.numerics
def test_full_size_default_path_equals_the_reference_route_128x512_cpu():
    torch.manual_seed(0)
    net = TOLANet(backbone_init='random', lrc=dict(type='LatentResidualCorrection'), text_decoding='full_prefix')
    net.eval()
    try:
        assert net.trainable_parameter_counts() == {
            'idm_lora': 2_027_520, 'vae_lora': 250_548, 'lrc': 180_323, 'total': 2_458_391
        }
        assert sum(p.numel() for p in net.idm.parameters() if not p.requires_grad) == 874_024_003
        assert torch.count_nonzero(net.lrc.conv_out.weight) == 0  # the LRC starts at Δr = 0
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():  # adapters with values (at init they add exact zeros), scores with clear argmaxes
            for param in net.parameters():
                if param.requires_grad:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.01)
            net.transocr.generator_word.proj.weight.mul_(8.0)
        lq = torch.rand(1, 3, 128, 512, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            ref = net(lq, noise_seeds=[0], return_intermediates=True)  # DiffTSR's way: unmerged, full prefix
            logits = net.transocr(lq, net.transocr.greedy_decode(lq, max_steps=24, incremental=False)[0])
        net.text_decoding = 'incremental'
        out = net.prepare_for_inference()(lq, noise_seeds=[0], return_intermediates=True)
        assert out['z_lr'].shape == out['z0'].shape == (1, 3, 32, 128)
        assert out['tokens'].shape == out['confidences'].shape == (1, 24)
        assert out['image'].shape == (1, 3, 128, 512) and torch.isfinite(out['image']).all()
        assert out['image'].min() >= 0 and out['image'].max() <= 1
        assert_clear_argmax(logits[:, :23], TOL * float(logits.abs().max()), 'full-size TransOCR steps')
        assert torch.equal(out['tokens'], ref['tokens'])
        within(rel_err(out['confidences'], ref['confidences']), TOL, 'full-size default vs reference confidences')
        within(rel_err(out['image'], ref['image']), TOL, 'full-size default vs reference image')
    finally:
        del net
        gc.collect()
