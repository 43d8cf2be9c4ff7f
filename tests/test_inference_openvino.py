"""The CPU backend (OpenVINO) and the runtime decision of the inference entry points: parity with the torch route on
a tiny model, the on-disk cache of the converted stages, backend / device / TF32 resolution (CUDA simulated)."""
import json
import os
import warnings

import numpy as np
import pytest
import torch

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.inference import openvino_backend as OV
from tola_plugin.inference import runtime
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.utils.devices import resolve_device
from inference_testing import write_tiny_merged
from numerics import within
from tola_testing import one_thread  # noqa: F401

pytestmark = [pytest.mark.usefixtures('one_thread'), pytest.mark.openvino]


@pytest.fixture(scope='module')
def cache_home(tmp_path_factory):
    """A cache folder of this module's own, so that the conversion below really runs."""
    old = os.environ.get('XDG_CACHE_HOME')
    os.environ['XDG_CACHE_HOME'] = str(tmp_path_factory.mktemp('ov_cache'))
    yield os.environ['XDG_CACHE_HOME']
    os.environ['XDG_CACHE_HOME'] = old


@pytest.fixture(scope='module')
def converted(cache_home, tmp_path_factory):
    """(merged file, torch network, OpenVINO network) of the tiny model: converted once for the module."""
    path = write_tiny_merged(tmp_path_factory.mktemp('ov') / 'tiny_merged.safetensors')
    net = OV.use_openvino(TOLANet.load_for_inference(path), path)
    return path, TOLANet.load_for_inference(path), net


@pytest.mark.numerics
@pytest.mark.parametrize('shape', [(2, 3, 128, 512), (1, 3, 32, 256)])  # batch and image size stay dynamic
def test_openvino_matches_the_torch_route(converted, shape):
    _, ref_net, ov_net = converted
    assert OV.uses_openvino(ov_net) and not OV.uses_openvino(ref_net)
    lq = torch.rand(*shape, generator=torch.Generator().manual_seed(shape[-1]))
    seeds = list(range(shape[0]))
    ref = ref_net(lq, noise_seeds=seeds, return_intermediates=True)
    ours = ov_net(lq, noise_seeds=seeds, return_intermediates=True)
    assert torch.equal(ours['tokens'], ref['tokens'])  # the text prior's ids: exact
    assert ours['image'].dtype == torch.float32 and ours['image'].shape == ref['image'].shape
    err = float((ours['image'] - ref['image']).abs().max())
    # float32 vs float32, two runtimes' kernels; the image is downstream of t = 999 (x101.6 of the IDM's rounding).
    # Largest measured 1.1e-05 (default kernels, AVX2, default ISA: OpenVINO keeps its own kernels): 100x -> 2e-3
    within(err, 2e-3, f'OpenVINO vs torch image, {tuple(shape)}')
    # as 8-bit images: a 2e-3 bound crosses at most one rounding boundary
    as_u8 = [(x * 255.0).round().to(torch.int16) for x in (ours['image'], ref['image'])]
    assert int((as_u8[0] - as_u8[1]).abs().max()) <= 1


def test_openvino_runs_the_precision_of_the_forward(converted):
    """Under bf16 autocast (the network's precision bf16) each stage is compiled for bf16, once."""
    _, _, ov_net = converted
    lq = torch.rand(1, 3, 32, 128, generator=torch.Generator().manual_seed(0))
    ov_net.set_switches(precision='bf16')
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # bf16 on a CPU without bf16 instructions warns; the plumbing counts
            out = ov_net(lq, noise_seeds=[0])
            again = ov_net(lq, noise_seeds=[0])
    finally:
        ov_net.set_switches(precision='fp32')
    assert out.dtype == torch.float32 and torch.isfinite(out).all() and torch.equal(out, again)
    assert 'bf16' in ov_net.idm.stage.requests and 'bf16' in ov_net.vae.decoder_stage.requests
    assert len(ov_net.idm.stage.compiled) == 2  # f32 and bf16, each compiled once


def test_converted_stages_are_cached_and_rebuilt_when_stale_or_corrupt(converted, monkeypatch):
    path, _, _ = converted
    builds = []
    real_build = OV.StageCache.build
    monkeypatch.setattr(OV.StageCache, 'build', lambda self, *a: builds.append(1) or real_build(self, *a))

    def load():
        return OV.use_openvino(TOLANet.load_for_inference(path), path)

    load()
    assert builds == []  # the module's conversion is reused: keyed by the merged file's SHA-256
    cache = OV.StageCache(f'{OV.file_sha256(path)}-openvino{__import__("openvino").__version__}')
    files = sorted(cache.files() + [OV.MANIFEST])
    assert cache.valid() and sorted(os.listdir(cache.folder)) == files
    blob = cache.path('vae_decoder')[:-len('xml')] + 'bin'
    data = bytearray(open(blob, 'rb').read())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped: the hash check finds it
    with open(blob, 'wb') as f:
        f.write(data)
    assert not cache.valid()
    net = load()
    assert builds == [1] and cache.valid()
    lq = torch.rand(1, 3, 32, 128, generator=torch.Generator().manual_seed(1))
    assert torch.isfinite(net(lq, noise_seeds=[0])).all()
    manifest = os.path.join(cache.folder, OV.MANIFEST)
    good = open(manifest, encoding='utf-8').read()
    for broken in ('{"format": ', json.dumps(dict(json.loads(good), openvino='0.0')),
                   json.dumps(dict(json.loads(good), format='other/1'))):
        with open(manifest, 'w', encoding='utf-8') as f:
            f.write(broken)  # cut short, another OpenVINO version, another format: rebuilt like the blob above
        assert not cache.valid()
    os.remove(cache.path('idm'))
    with open(manifest, 'w', encoding='utf-8') as f:
        f.write(good)
    assert not cache.valid()  # a stage missing
    leftovers = [p for p in os.listdir(os.path.dirname(cache.folder)) if '.building-' in p or '.stale-' in p]
    assert os.listdir(OV.compiled_cache_dir())  # OpenVINO's own cache of the compiled stages
    assert leftovers == []


def test_other_weights_get_their_own_entry(converted, tmp_path):
    """A merged file with other values is another key: never the stale stages of the first."""
    path, _, _ = converted
    other = tmp_path / 'other.safetensors'
    net = TOLANet.from_merged(path)
    with torch.no_grad():
        net.lrc.conv_out.weight.add_(0.01)
    net.save_merged(str(other))
    assert OV.file_sha256(str(other)) != OV.file_sha256(path)


def test_backend_resolution(monkeypatch, capsys):
    cpu, gpu = torch.device('cpu'), torch.device('cuda', 0)
    assert runtime.resolve_backend('auto', cpu) == 'openvino'  # installed here (requirements.txt)
    assert runtime.resolve_backend('torch', cpu) == 'torch'
    assert runtime.resolve_backend('auto', gpu) == 'torch'
    with pytest.raises(ValueError, match='openvino runs on the CPU'):
        runtime.resolve_backend('openvino', gpu)
    with pytest.raises(ValueError, match='backend must be one of'):
        runtime.resolve_backend('onnxruntime', cpu)
    monkeypatch.setattr(OV, 'openvino_missing', lambda: 'openvino is not installed (test)')
    capsys.readouterr()
    assert runtime.resolve_backend('auto', cpu) == 'torch'  # falls back, saying so in one line
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'openvino is not installed' in err and 'torch' in err
    with pytest.raises(ValueError, match='openvino is not installed'):
        runtime.resolve_backend('openvino', cpu)


class _Placed(torch.nn.Module):
    """Stands in for a network on a simulated GPU: records .to()."""

    def __init__(self):
        super().__init__()
        self.moves = []

    def to(self, device):
        self.moves.append(torch.device(device))
        return self


def test_device_backend_and_tf32_are_resolved_in_one_place(monkeypatch):
    """CUDA simulated: the default device is the GPU, TF32 is off unless asked for, backend auto is torch there."""
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        net, device, backend = runtime.place_network(_Placed())
        assert device == torch.device('cuda') and backend == 'torch' and net.moves == [device]
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        runtime.place_network(_Placed(), 'cuda:1', allow_tf32=True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert resolve_device(None) == torch.device('cpu')
    with pytest.raises(ValueError, match='CUDA is not available'):
        resolve_device('cuda')
    with pytest.raises(ValueError, match="device 'gpu'"):
        resolve_device('gpu')


def test_pipeline_uses_openvino_on_the_cpu_by_default(converted):
    path, _, _ = converted
    pipe = TOLAPipeline.from_merged(path, batch_size=2)
    assert pipe.backend == 'openvino' and OV.uses_openvino(pipe.net) and pipe.device == torch.device('cpu')
    plain = TOLAPipeline.from_merged(path, backend='torch', batch_size=2)
    assert plain.backend == 'torch' and not OV.uses_openvino(plain.net)
    line = np.random.default_rng(0).integers(0, 256, (32, 300, 3), dtype=np.uint8)
    a, b = pipe(line, names=['l.png']), plain(line, names=['l.png'])
    assert a.lines[0].window_texts == b.lines[0].window_texts
    assert np.abs(a.image.astype(int) - b.image.astype(int)).max() <= 1  # within the parity bound above
    with pytest.raises(ValueError, match='OpenVINO'):
        pipe.to('meta')


def test_batch_size_follows_the_free_memory(converted, monkeypatch):
    _, ref_net, _ = converted
    per_window = runtime.window_bytes(ref_net)
    assert per_window == runtime.WINDOW_ACTIVATIONS * ref_net.vae.config.block_out_channels[0] * 128 * 512 * 4
    for free, expected in ((0, 1), (3 * per_window, 1), (7 * per_window, 3), (10**15, runtime.MAX_AUTO_BATCH)):
        monkeypatch.setattr(runtime, 'free_memory', lambda device, free=free: free)
        assert runtime.auto_batch_size(ref_net, torch.device('cpu')) == expected
    pipe = TOLAPipeline(ref_net)  # free memory still the last value above
    assert pipe.batch_size == runtime.MAX_AUTO_BATCH and TOLAPipeline(ref_net, batch_size=3).batch_size == 3
    with pytest.raises(ValueError, match='batch_size'):
        TOLAPipeline(ref_net, batch_size=0)
