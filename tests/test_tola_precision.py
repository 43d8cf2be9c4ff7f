"""The precision switch: what each setting resolves to per device and CPU (without a runtime decision, and the order
in which the runtime tries them), the bf16 speed measurement, and that TOLANet honours it."""
import json
import os
import warnings

import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs import precision as P
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.runtime import bf16_speed, plan
from tola_plugin.utils import user_cache
from tola_testing import REPO, one_thread, tiny_net_opt  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


def resolve(precision):
    """(dtype, the warning messages) of ``precision`` on the CPU."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        dtype = P.requested_dtype(precision, 'cpu')
    return dtype, [str(w.message) for w in caught]


# CPUs: none (emulated bf16), bf16 instructions measured slower (a Xeon without AMX), measured faster (AMD EPYC, AMX),
# and with fp16 instructions measured faster too (AVX512-FP16 or AMX-FP16)
@pytest.mark.parametrize('native_bf16, speedup, fp16_instructions', [(False, None, False), (True, 0.55, False),
                                                                     (True, 2.4, False), (True, 2.4, True)])
def test_resolution_on_cpu(monkeypatch, native_bf16, speedup, fp16_instructions):
    measured = []
    monkeypatch.setattr(plan, 'cpu_has_native_bf16', lambda: native_bf16)
    monkeypatch.setattr(plan, 'cpu_has_fp16_instructions', lambda: fp16_instructions)
    monkeypatch.setattr(P, 'cpu_has_native_bf16', lambda: native_bf16)
    monkeypatch.setattr(P, 'cpu_has_fp16_instructions', lambda: fp16_instructions)
    monkeypatch.setattr(bf16_speed, 'speedup', lambda precision: measured.append(precision) or {'speedup': speedup})
    faster = native_bf16 and speedup >= bf16_speed.AUTO_MIN_SPEEDUP
    assert resolve('fp32') == (torch.float32, [])
    assert resolve('auto') == (torch.float32, [])  # without a runtime decision: never an unproven fast path
    assert measured == []
    cpu = torch.device('cpu')
    paths = [p.name for p in plan.candidate_paths(cpu, ['openvino', 'torch'], 'auto')]
    if fp16_instructions:  # the IDM in fp16, the VAE in bf16; then the stages back to fp32 one by one
        auto = [
            'fp32 (bf16: vae_encoder, vae_decoder; fp16: idm)', 'fp32 (fp16: idm; bf16: vae_decoder)',
            'fp32 (bf16: vae_decoder)', 'fp32'
        ]
    elif faster:  # the IDM stays fp32: ε̂'s error reaches ẑ0 x 101.6
        auto = ['fp32 (bf16: vae_encoder, vae_decoder)', 'fp32 (bf16: vae_decoder)', 'fp32']
    else:
        auto = ['fp32']
    assert paths == [f'{backend} {p}' for backend in ('openvino', 'torch') for p in auto]
    # what has no instructions is not measured (emulated: never fast); fp16 only where the CPU has fp16 instructions
    assert sorted(set(measured)) == sorted(['bf16'] * native_bf16 + ['fp16'] * fp16_instructions)
    assert [p.name for p in plan.candidate_paths(cpu, ['torch'], 'bf16')] == ['torch bf16']  # explicit: as asked
    assert [p.name for p in plan.candidate_paths(cpu, ['torch'], 'fp16')] == ['torch fp16 (fp32: vae_decoder)']
    dtype, messages = resolve('bf16')
    assert dtype == torch.bfloat16
    if native_bf16:
        assert messages == []
    else:
        assert len(messages) == 1 and 'emulated' in messages[0]
    dtype, messages = resolve('fp16')
    assert dtype == torch.float16 and len(messages) == (0 if fp16_instructions else 1)
    with pytest.raises(ValueError, match='precision'):
        P.requested_dtype('int8', 'cpu')


def test_auto_on_cuda_never_measures_the_cpu(monkeypatch):
    """CUDA simulated: auto runs the IDM in fp16 on GPUs with fp16 tensor cores (the most precise fast type: bf16's
    8 bits of mantissa move ẑ0 ten times more), the VAE in bf16 on GPUs with native bf16, without the CPU
    measurement; then the stages back to fp32 one by one."""
    monkeypatch.setattr(bf16_speed, 'speedup', lambda precision: pytest.fail('measured the CPU for a GPU'))
    cuda = torch.device('cuda', 0)
    for tensor_cores, native, expected in ((True, True, [
            'torch fp32 (bf16: vae_encoder, vae_decoder; fp16: idm)', 'torch fp32 (fp16: idm; bf16: vae_decoder)',
            'torch fp32 (bf16: vae_decoder)', 'torch fp32'
    ]), (True, False, ['torch fp32 (fp16: idm)', 'torch fp32']), (False, False, ['torch fp32'])):
        monkeypatch.setattr(plan, 'cuda_has_native_bf16', lambda device: native)
        monkeypatch.setattr(plan, 'cuda_has_fp16_tensor_cores', lambda device: tensor_cores)
        assert [p.name for p in plan.candidate_paths(cuda, ['torch'], 'auto')] == expected
    dtypes = plan.fast_dtypes(cuda)
    assert dtypes['idm'] == torch.float32 and dtypes['mom'] == dtypes['lrc'] == torch.float32


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    """An empty user cache folder, and no decision remembered by this process."""
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    bf16_speed.forget()
    yield tmp_path / 'tola-plugin' / bf16_speed.CACHE_FILE
    bf16_speed.forget()


def test_speed_decision_is_measured_once_and_cached(cache_home):
    runs = []

    def measure():
        runs.append(1)
        return {'speedup': 2.0, 'fp32_s': 0.2, 'low_s': 0.1, 'threads': 1}

    first = bf16_speed.speedup('bf16', measure)
    assert first['source'] == 'measured' and first['speedup'] == 2.0 and runs == [1]
    entries = json.loads(cache_home.read_text())['entries']
    assert list(entries) == [bf16_speed.cache_key('bf16')] and entries[bf16_speed.cache_key()]['speedup'] == 2.0
    assert 'torch ' + torch.__version__ in bf16_speed.cache_key() and ' flags ' in bf16_speed.cache_key()
    assert bf16_speed.speedup('bf16', measure)['speedup'] == 2.0 and runs == [1]  # this process remembers
    bf16_speed.forget()  # a new process reads the file
    again = bf16_speed.speedup('bf16', measure)
    assert again['source'] == 'cache' and again['speedup'] == 2.0 and runs == [1]
    assert not [p for p in os.listdir(cache_home.parent) if p.endswith('.tmp')]  # written atomically
    fp16 = bf16_speed.speedup('fp16', lambda: {'speedup': 0.5, 'fp32_s': 0.1, 'low_s': 0.2, 'threads': 1})
    assert fp16['speedup'] == 0.5 and bf16_speed.speedup('bf16')['speedup'] == 2.0  # one entry per precision


@pytest.mark.parametrize('corrupt', ['{"format": "tola_plugin.bf16_speed/3", "entr', '[]', '', 'KEY'])
def test_corrupt_bf16_cache_is_measured_again(cache_home, corrupt):
    cache_home.parent.mkdir(parents=True)
    if corrupt == 'KEY':  # our format, but this CPU's entry broken
        corrupt = json.dumps({'format': bf16_speed.FORMAT, 'entries': {bf16_speed.cache_key(): {'speedup': -1}}})
    cache_home.write_text(corrupt)
    entry = bf16_speed.speedup('bf16', lambda: {'speedup': 0.5, 'fp32_s': 0.1, 'low_s': 0.2, 'threads': 1})
    assert entry['source'] == 'measured' and entry['speedup'] == 0.5
    assert json.loads(cache_home.read_text())['entries'][bf16_speed.cache_key()]['speedup'] == 0.5  # rewritten


@pytest.mark.parametrize('precision', ['bf16', 'fp16'])
def test_speed_measurement_times_both_precisions(cache_home, precision):
    """The real micro-benchmark on two small shapes, in a child process: both sides timed, the ratio is theirs."""
    result = bf16_speed.measure_speedup(precision, shapes=((8, 8, 16), (16, 4, 8)), rounds=1)
    assert {'fp32_s', 'low_s'} <= set(result) and result['finite']
    assert result['speedup'] == pytest.approx(result['fp32_s'] / result['low_s'])


def test_bf16_measurement_that_crashes_is_fp32(cache_home, monkeypatch):
    """A bf16 kernel that kills the measuring child (simulated) is a speedup of 0: bf16 is not tried."""
    monkeypatch.setattr(bf16_speed, 'PROBE', os.path.join(REPO, 'tests', 'data', 'runtime', 'segfault.py'))
    result = bf16_speed.measure_speedup('bf16', rounds=1)
    assert result['speedup'] == 0.0 and 'died by SIGSEGV' in result['failed']


def test_cache_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    assert user_cache.cache_root() == os.path.join(str(tmp_path), 'tola-plugin')
    monkeypatch.setenv('XDG_CACHE_HOME', 'relative/path')  # ignored, as the specification asks
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    assert user_cache.cache_root() == os.path.join(str(tmp_path), 'home', '.cache', 'tola-plugin')


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
        net.set_switches(precision='bf16')
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # bf16 on a CPU without AMX warns; here only the plumbing counts
            low = net(lq, noise_seeds=[1], return_intermediates=True)
    assert seen == {'decoder': [torch.float32, torch.bfloat16], 'prior': [torch.float32, torch.float32]}
    assert low['image'].dtype == torch.float32 and low['image'].shape == ref['image'].shape  # handed back in fp32
    assert not torch.equal(low['image'], ref['image'])
    assert torch.equal(low['tokens'], ref['tokens']) and torch.equal(low['confidences'], ref['confidences'])
    with pytest.raises(ValueError, match='precision'):
        net.set_switches(precision='half')
    with pytest.raises(ValueError, match='precision'):
        TOLANet(**tiny_net_opt(precision='fp64'))
