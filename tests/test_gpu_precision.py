"""Precision that is safe at t = 999, tested on a CPU (CUDA simulated where the decision depends on the GPU):
'auto' runs the IDM in fp16 on GPUs with fp16 tensor cores and the VAE in bf16 only on GPUs with native bf16,
Algorithm 1's arithmetic and the IDM's output convolution stay fp32 under autocast, the VAE decoder runs in fp32
under fp16, training refuses fp16, and the launchers apply ``allow_tf32`` and ``deterministic``
(utils/cuda_math.py)."""
import os
import warnings

import pytest
import torch

from basicsr.models import build_model

from tola_plugin.archs import precision as P
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.basicsr_glue.resume_state import load_resume_state
from tola_plugin.runtime import plan
from tola_plugin.utils import cuda_math
from tola_testing import REPO, load_yaml, one_thread, tiny_net_opt, tiny_options  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


def simulate_gpu(monkeypatch, native_bf16):
    """A GPU whose bf16 is native (Ampere and newer) or emulated only (T4, V100: torch counts emulation)."""
    simulate_gpus(monkeypatch, [(8, 0) if native_bf16 else (7, 5)])


def simulate_gpus(monkeypatch, capabilities, current=0):
    """GPUs of the given compute capabilities ((8, 0) and newer: native bf16, Ampere; (7, 5): T4, emulated only),
    ``current`` the current device; torch's own device queries answer for them."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: len(capabilities))
    monkeypatch.setattr(torch.cuda, 'current_device', lambda: current)
    monkeypatch.setattr(torch.version, 'cuda', '13.0')

    def index(device=None):
        if device is None or isinstance(device, int):
            return current if device is None else device
        return current if torch.device(device).index is None else torch.device(device).index

    monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda device=None: capabilities[index(device)])
    monkeypatch.setattr(torch.cuda, 'get_device_properties',
                        lambda device=None: type('Props', (), {'major': capabilities[index(device)][0]})())


def fast(device):
    """(IDM, VAE encoder, VAE decoder) precisions 'auto' tries first on ``device``."""
    dtypes = plan.fast_dtypes(torch.device(device))
    return dtypes['idm'], dtypes['vae_encoder'], dtypes['vae_decoder']


@pytest.mark.parametrize('native_bf16', [True, False], ids=['ampere', 'turing'])
def test_auto_on_cuda_uses_native_bf16_only(monkeypatch, native_bf16):
    simulate_gpu(monkeypatch, native_bf16)
    # the IDM in fp16 on both (tensor cores), the VAE in bf16 only where it is native
    low = torch.bfloat16 if native_bf16 else torch.float32
    assert fast('cuda') == (torch.float16, low, low)
    assert P.requested_dtype('auto', 'cuda') == torch.float32  # without the runtime's decision
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert P.requested_dtype('bf16', 'cuda') == torch.bfloat16
    assert len(caught) == (0 if native_bf16 else 1)


def bf16_warnings(device):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert P.requested_dtype('bf16', device) == torch.bfloat16
    return len(caught)


@pytest.mark.parametrize('current', [0, 1])
def test_bf16_is_asked_of_the_target_gpu_not_the_current_one(monkeypatch, current):
    """A node of mixed GPUs (``--device cuda:1``): a T4 as cuda:0, an H100 as cuda:1, either one current; a P100 (no
    fp16 tensor cores) runs the IDM in fp32."""
    simulate_gpus(monkeypatch, [(7, 5), (9, 0), (6, 0)], current=current)
    assert fast('cuda:2') == (torch.float32, ) * 3
    assert P.cuda_has_native_bf16('cuda:1') and not P.cuda_has_native_bf16(torch.device('cuda', 0))
    assert fast('cuda:1')[1] == torch.bfloat16  # what 'auto' tries first there
    assert fast('cuda:0')[1] == torch.float32
    assert fast('cuda')[1] == (torch.float32, torch.bfloat16)[current]
    assert (bf16_warnings('cuda:0'), bf16_warnings('cuda:1')) == (1, 0)


def test_training_refuses_fp16(tmp_path, rendered_sets):
    P.check_training_precision(torch.float32)
    P.check_training_precision(torch.bfloat16)
    with pytest.raises(ValueError, match='fp16 needs loss scaling'):
        P.check_training_precision(torch.float16)
    opt = tiny_options(load_yaml(os.path.join(REPO, 'options/train/train_TOLA.yml')), rendered_sets, tmp_path)
    opt['train'].pop('perceptual_opt')
    opt['network_g']['precision'] = 'fp16'
    with pytest.raises(ValueError, match='network_g.precision: training in fp16'), warnings.catch_warnings():
        warnings.simplefilter('ignore')  # fp16 on a CPU without fp16 instructions also warns that it is slow
        build_model(opt)


def autocast_dtype():
    return torch.get_autocast_dtype('cpu') if torch.is_autocast_enabled('cpu') else torch.float32


@pytest.fixture(scope='module')
def tiny_net():
    torch.manual_seed(0)
    return TOLANet(**tiny_net_opt()).eval()


@pytest.mark.parametrize('precision', ['bf16', 'fp16'])
def test_algorithm1_stays_fp32_under_autocast(tiny_net, monkeypatch, precision):
    """Low precision computes the networks' layers; z_t, ε̂, ẑ0 and the residuals are fp32 (ẑ0 carries ε̂'s error
    x 101.6 at t = 999), the IDM's output convolution runs with autocast off, and under fp16 the VAE decoder too."""
    net = tiny_net
    seen = {}

    def spy(name, fn):

        def run(*args, **kwargs):
            seen[name] = autocast_dtype()
            out = fn(*args, **kwargs)
            seen[name + ' output'] = (out[0] if isinstance(out, tuple) else getattr(out, 'sample', out)).dtype
            return out

        return run

    monkeypatch.setattr(net.idm.conv_out, 'forward', spy('idm conv_out', net.idm.conv_out.forward))
    monkeypatch.setattr(net.idm.conv_in, 'forward', spy('idm conv_in', net.idm.conv_in.forward))
    monkeypatch.setattr(net.vae, 'decode', spy('decoder', net.vae.decode))
    net.set_switches(precision=precision)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter('ignore')  # low precision on a CPU without AMX warns; only the dtypes count here
            out = net(torch.rand(1, 3, 32, 128), noise_seeds=[5], return_intermediates=True)
    finally:
        net.set_switches(precision='fp32')
    low = torch.bfloat16 if precision == 'bf16' else torch.float16
    assert seen['idm conv_in'] == low and seen['idm conv_in output'] == low  # the IDM itself runs low
    assert seen['idm conv_out'] == low and seen['idm conv_out output'] == torch.float32  # ...its output conv not
    assert seen['decoder'] == (low if precision == 'bf16' else torch.float32)
    for key in ('z_lr', 'eps', 'z_t', 'eps_hat', 'z0', 'r', 'delta_r', 'z0_corr', 'image'):
        assert out[key].dtype == torch.float32, key


def test_tf32_and_deterministic_options(monkeypatch):
    tf32 = cuda_math.tf32_allowed()
    benchmark, deterministic = torch.backends.cudnn.benchmark, torch.are_deterministic_algorithms_enabled()
    monkeypatch.delenv('CUBLAS_WORKSPACE_CONFIG', raising=False)
    try:
        cuda_math.apply_options({'allow_tf32': True})
        assert cuda_math.tf32_allowed() == {'matmul': True, 'conv': True}
        assert not torch.are_deterministic_algorithms_enabled()
        cuda_math.apply_options({})  # the default: IEEE fp32 (PyTorch's own default has TF32 convolutions)
        assert cuda_math.tf32_allowed() == {'matmul': False, 'conv': False}
        # BasicSR's train_pipeline sets cudnn.benchmark after parse_options; load_resume_state applies it again
        torch.backends.cudnn.benchmark = True
        opt = {'deterministic': True, 'auto_resume': False, 'path': {}}
        assert load_resume_state(opt) is None
        assert not torch.backends.cudnn.benchmark and torch.are_deterministic_algorithms_enabled()
        assert os.environ['CUBLAS_WORKSPACE_CONFIG'] == ':4096:8'
        with torch.backends.cudnn.flags(enabled=True):  # torch's own readers of the flags still work
            pass
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32['matmul'], tf32['conv']
        torch.backends.cudnn.benchmark = benchmark
        torch.use_deterministic_algorithms(deterministic)


def test_training_in_bf16_keeps_the_idm_in_fp32(monkeypatch):
    """bf16 training computes every stage in bf16 but the IDM, in fp32 (its ε̂ error reaches the gradient through ẑ0
    x 101.6, and an IDM in bf16 never serves); in eval mode the switch runs as asked, bf16 everywhere."""
    torch.manual_seed(0)
    net = TOLANet(**tiny_net_opt(precision='bf16'))
    seen = {}

    def spy(name, owner, attribute):
        real = getattr(owner, attribute)

        def run(*args, **kwargs):
            seen[name] = autocast_dtype()
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, attribute, run)

    spy('idm', net.idm, 'forward')
    spy('vae_encoder', net.vae, 'encode')
    spy('vae_decoder', net.vae, 'decode')
    spy('lrc', net.lrc, 'forward')
    lq = torch.rand(1, 3, 32, 128)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # bf16 on a CPU without bf16 instructions warns
        net.train()
        net(lq, noise_seeds=[0]).mean().backward()
        assert seen == {
            'vae_encoder': torch.bfloat16, 'idm': torch.float32, 'lrc': torch.bfloat16, 'vae_decoder': torch.bfloat16
        }
        net.eval()
        with torch.no_grad():
            net(lq, noise_seeds=[0])
    assert seen['idm'] == torch.bfloat16  # outside training: as asked
