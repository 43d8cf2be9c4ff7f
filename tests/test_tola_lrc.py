"""LRC and the plain correction branch: the paper's parameter counts and the zero-initialised output."""
import pytest
import torch

from basicsr.archs import build_network
from basicsr.archs.rrdbnet_arch import RRDB

import tola_plugin  # noqa: F401


def _count(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize('hgn, expected', [((32, 16, 1), 180_323), ((16, 8, 1), 45_235), ((32, 16, 2), 360_323)])
def test_lrc_parameter_counts(hgn, expected):
    h, g, n = hgn
    lrc = build_network(dict(type='LatentResidualCorrection', num_feat=h, num_grow_ch=g, num_block=n))
    assert _count(lrc) == expected
    assert sum(isinstance(m, RRDB) for m in lrc.modules()) == n  # BasicSR's RRDB, not a copy


def test_plain_residual_parameter_count():
    assert _count(build_network(dict(type='PlainResidualCorrection'))) == 180_093


@pytest.mark.parametrize('arch', ['LatentResidualCorrection', 'PlainResidualCorrection'])
def test_zero_initialised_output_and_trainable(arch):
    torch.manual_seed(0)
    net = build_network(dict(type=arch))
    x = torch.randn(2, 6, 8, 32) * 5
    out = net(x)
    assert out.shape == (2, 3, 8, 32)
    assert torch.count_nonzero(out) == 0
    out.sum().backward()
    # the zero output conv still learns (its gradient is the features, not zero)
    assert net.conv_out.weight.grad.abs().sum() > 0


def test_lrc_rejects_no_block():
    with pytest.raises(ValueError, match='num_block'):
        build_network(dict(type='LatentResidualCorrection', num_block=0))
