"""The precision switch: what each setting resolves to per device and CPU, and that TOLANet honours it."""
import warnings

import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs import precision as P
from tola_plugin.archs.tola_arch import TOLANet
from tola_testing import tiny_net_opt, one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.mark.parametrize('native', [True, False])
def test_resolution_on_cpu(monkeypatch, native):
    monkeypatch.setattr(P, 'cpu_has_native_bf16', lambda: native)
    assert P.resolve_precision('fp32', 'cpu') == torch.float32
    assert P.resolve_precision('auto', 'cpu') == (torch.bfloat16 if native else torch.float32)
    if native:
        assert P.resolve_precision('bf16', 'cpu') == torch.bfloat16
    else:
        with pytest.warns(UserWarning, match='emulated'):
            assert P.resolve_precision('bf16', 'cpu') == torch.bfloat16
    with pytest.raises(ValueError, match='precision'):
        P.resolve_precision('int8', 'cpu')


def test_tolanet_runs_in_the_chosen_precision(monkeypatch):
    torch.manual_seed(0)
    net = TOLANet(**tiny_net_opt()).eval()
    lq = torch.rand(1, 3, 32, 128)
    seen = []
    decode = net.vae.decode

    def spy(z, **kwargs):
        seen.append(torch.get_autocast_dtype('cpu') if torch.is_autocast_enabled('cpu') else torch.float32)
        return decode(z, **kwargs)

    monkeypatch.setattr(net.vae, 'decode', spy)
    with torch.no_grad():
        ref = net(lq, noise_seeds=[1])
        net.set_precision('bf16')
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # bf16 on a CPU without native bf16 warns; here only the plumbing counts
            low = net(lq, noise_seeds=[1])
    assert seen == [torch.float32, torch.bfloat16]
    assert low.dtype == torch.float32 and low.shape == ref.shape   # output handed back in fp32
    assert not torch.equal(low, ref)
    with pytest.raises(ValueError, match='precision'):
        net.set_precision('half')

