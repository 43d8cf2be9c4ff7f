"""The precision switch: what each setting resolves to per device and CPU, and that TOLANet honours it."""
import warnings

import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs import precision as P
from tola_plugin.archs.tola_arch import TOLANet
from tola_testing import one_thread, tiny_net_opt  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


def resolve(precision):
    """(dtype, the warning messages) of ``precision`` on the CPU."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        dtype = P.resolve_precision(precision, 'cpu')
    return dtype, [str(w.message) for w in caught]


# CPUs: none (emulated bf16), AVX512-BF16 only, AMX (bf16 tiles), AMX with FP16
@pytest.mark.parametrize('native_bf16, amx_bf16, amx_fp16', [(False, False, False), (True, False, False),
                                                             (True, True, False), (True, True, True)])
def test_resolution_on_cpu(monkeypatch, native_bf16, amx_bf16, amx_fp16):
    monkeypatch.setattr(P, 'cpu_has_native_bf16', lambda: native_bf16)
    monkeypatch.setattr(P, 'cpu_has_amx_bf16', lambda: amx_bf16)
    monkeypatch.setattr(P, 'cpu_has_amx_fp16', lambda: amx_fp16)
    assert resolve('fp32') == (torch.float32, [])
    assert resolve('auto') == (torch.bfloat16 if amx_bf16 else torch.float32, [])  # never a slow choice
    dtype, messages = resolve('bf16')
    assert dtype == torch.bfloat16
    if amx_bf16:
        assert messages == []
    else:
        assert len(messages) == 1 and ('about half the speed' if native_bf16 else 'emulated') in messages[0]
    dtype, messages = resolve('fp16')
    assert dtype == torch.float16 and len(messages) == (0 if amx_fp16 else 1)
    with pytest.raises(ValueError, match='precision'):
        P.resolve_precision('int8', 'cpu')


def test_tolanet_runs_in_the_chosen_precision(monkeypatch):
    torch.manual_seed(0)
    net = TOLANet(**tiny_net_opt()).eval()
    lq = torch.rand(1, 3, 32, 128)
    seen = {'prior': [], 'decoder': []}

    def autocast_state():
        return torch.get_autocast_dtype('cpu') if torch.is_autocast_enabled('cpu') else torch.float32

    def spy(name, fn):

        def run(*args, **kwargs):
            seen[name].append(autocast_state())
            return fn(*args, **kwargs)

        return run

    monkeypatch.setattr(net.vae, 'decode', spy('decoder', net.vae.decode))
    monkeypatch.setattr(net.transocr, 'greedy_decode', spy('prior', net.transocr.greedy_decode))
    with torch.no_grad():
        ref = net(lq, noise_seeds=[1], return_intermediates=True)
        net.set_precision('bf16')
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # bf16 on a CPU without AMX warns; here only the plumbing counts
            low = net(lq, noise_seeds=[1], return_intermediates=True)
    assert seen == {'decoder': [torch.float32, torch.bfloat16], 'prior': [torch.float32, torch.float32]}
    assert low['image'].dtype == torch.float32 and low['image'].shape == ref['image'].shape  # handed back in fp32
    assert not torch.equal(low['image'], ref['image'])
    assert torch.equal(low['tokens'], ref['tokens']) and torch.equal(low['confidences'], ref['confidences'])
    with pytest.raises(ValueError, match='precision'):
        net.set_precision('half')
    with pytest.raises(ValueError, match='precision'):
        TOLANet(**tiny_net_opt(precision='fp64'))
