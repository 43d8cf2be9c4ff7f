"""Full size (874M-parameter IDM, random weights) on CPU: the paper's trainable-parameter counts, and the reference
route and the default inference path, one forward each, compute the same function (make test-end-to-end; the same
at test size: tests/test_tola_inference.py, and the counts: tests/test_tola_lora.py, in make test)."""
import gc
import math

import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.archs.transocr_arch import TransOCRPositionalTable
from numerics import EXACT_TOL, assert_clear_argmax, equivalent


def materialize_float64(net: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Allocate a meta-device network's tensors in float64 and fill them: weights from one block of 1,000,003
    uniform draws in [-1, 1] tiled over each tensor (a prime period, so no two rows of a matrix line up; drawing 1e9
    values would take 7 s more) times ±1/√fan_in (torch's default bound); TransOCR's positional table recomputed,
    BatchNorm statistics neutral. 8 GB are written once, no float32 copy is made."""
    net = net.to(torch.float64).to_empty(device='cpu')
    block = torch.rand(1_000_003, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 - 1
    offset = 0
    with torch.no_grad():
        for param in net.parameters():
            bound = 1.0 / math.sqrt(param[0].numel() if param.dim() > 1 else param.numel())
            flat, start = param.view(-1), offset % len(block)
            tiled = block.roll(-start).repeat(-(-flat.numel() // len(block)))[:flat.numel()]
            flat.copy_(tiled).mul_(bound)
            offset += flat.numel() + 7919  # each tensor starts elsewhere in the block
        for module in net.modules():
            if isinstance(module, TransOCRPositionalTable):
                module.pe.copy_(TransOCRPositionalTable(module.pe.shape[2], module.pe.shape[1]).pe)
            elif isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.reset_running_stats()
    assert not any(t.is_meta for t in (*net.parameters(), *net.buffers()))
    return net


@pytest.mark.numerics
@pytest.mark.end_to_end  # 8 GB of float64 weights written, a minute of a 2-core CPU: the long tier's (setup.cfg)
def test_full_size_default_path_equals_the_reference_route_float64():
    """Merged vs unmerged LoRA and cached vs full-prefix decoding are equal in exact arithmetic: both run in float64
    (8 GB of weights; a 32x128 input keeps the forwards at seconds: every layer is full size whatever the input)."""
    with torch.device('meta'):
        net = TOLANet(backbone_init='random', lrc=dict(type='LatentResidualCorrection'), text_decoding='full_prefix')
    try:
        assert net.trainable_parameter_counts() == {
            'idm_lora': 2_027_520, 'vae_lora': 250_548, 'lrc': 180_323, 'total': 2_458_391
        }
        assert sum(p.numel() for p in net.idm.parameters() if not p.requires_grad) == 874_024_003
        net = materialize_float64(net, seed=0).eval()  # adapters with values: at init they add exact zeros
        with torch.no_grad():  # spread scores: clear argmaxes and token confidences of about 0.5
            net.transocr.generator_word.proj.weight.mul_(300.0)
        lq = torch.rand(1, 3, 32, 128, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        with torch.no_grad():
            ref = net(lq, noise_seeds=[0], return_intermediates=True)  # DiffTSR's way: unmerged, full prefix
            logits = net.transocr(lq, net.transocr.greedy_decode(lq, max_steps=24, incremental=False)[0])
        net.text_decoding = 'incremental'
        out = net.prepare_for_inference()(lq, noise_seeds=[0], return_intermediates=True)
        assert out['z_lr'].shape == out['z0'].shape == (1, 3, 8, 32)
        assert out['tokens'].shape == out['confidences'].shape == (1, 24)
        assert out['image'].shape == (1, 3, 32, 128) and torch.isfinite(out['image']).all()
        assert out['image'].min() >= 0 and out['image'].max() <= 1 and out['image'].std() > 0.01
        assert 0.1 < float(ref['confidences'][0, 0]) < 0.9  # the weighting matters
        assert_clear_argmax(logits[:, :23], EXACT_TOL * float(logits.abs().max()), 'full-size TransOCR steps')
        assert torch.equal(out['tokens'], ref['tokens'])
        equivalent(out['confidences'], ref['confidences'], 'full-size default vs reference confidences')
        equivalent(out['image'], ref['image'], 'full-size default vs reference image')
    finally:
        del net
        gc.collect()
