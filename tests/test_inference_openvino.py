"""The CPU backend (OpenVINO, in its worker process) and the runtime decision of the inference entry points: parity
with the torch route on a tiny model where OpenVINO qualifies, the on-disk cache of the converted stages, backend /
device / TF32 resolution (CUDA simulated). What happens where a path is broken: tests/test_runtime_qualification.py."""
import contextlib
import io
import json
import os
import time

import numpy as np
import pytest
import torch

from tola_lab.benchmarks import stage_timing
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.inference import batching
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.runtime import qualification, serving
from tola_plugin.runtime.model_digest import file_sha256
from tola_plugin.runtime.openvino_backend import client as openvino_client
from tola_plugin.runtime.openvino_backend import stages as OVS
from tola_plugin.runtime.openvino_backend import worker as openvino_worker
from tola_plugin.runtime.routed_stages import RoutedStages
from tola_plugin.runtime.text_prior_stages import PRIOR_STAGES
from tola_plugin.utils import progress
from tola_plugin.utils.devices import resolve_device
from inference_testing import write_tiny_merged
from numerics import within
from tola_testing import one_thread  # noqa: F401

pytestmark = [pytest.mark.usefixtures('one_thread'), pytest.mark.openvino]


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
    """(merged file, torch network, OpenVINO pipeline, what converting it said on stderr) of the tiny model: converted
    and qualified once for the module, in a user cache of the module's own (so converted here, whatever the user's
    cache holds; skipped, with the verdict, where OpenVINO fp32 does not qualify on this machine: the fallback is
    tested with simulated failures)."""
    path = write_tiny_merged(tmp_path_factory.mktemp('ov') / 'tiny_merged.safetensors')
    said = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('XDG_CACHE_HOME', str(tmp_path_factory.mktemp('ov_cache')))
        home = os.path.join(os.path.dirname(path), 'home')  # where OpenVINO's telemetry would write
        os.mkdir(home)
        patch.setenv('HOME', home)
        patch.setattr(qualification.CACHE, 'memory', {})
        try:
            with pytest.MonkeyPatch.context() as quick, contextlib.redirect_stderr(said):
                quick.setattr(progress, 'LINE_SECONDS', 0.0)  # a line for every stage converted
                pipe = TOLAPipeline.from_merged(path, backend='openvino', batch_size=2)
        except serving.NoPathLeft as err:
            pytest.skip(f'OpenVINO fp32 does not qualify on this machine: {err}')
        yield path, TOLANet.load_for_inference(path), pipe, said.getvalue()
        pipe.close()


@pytest.mark.numerics
@pytest.mark.parametrize('shape', [(2, 3, 128, 512), (1, 3, 32, 256)])  # batch and image size stay dynamic
def test_openvino_matches_the_torch_route(converted, shape):
    _, ref_net, pipe, _ = converted
    ov_net = pipe.net
    assert pipe.plan.backend == 'openvino' and isinstance(ov_net.stage_runner, RoutedStages)
    assert ref_net.stage_runner.dtypes is None  # not placed: its own torch runner
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


@pytest.mark.numerics
@pytest.mark.parametrize('shape', [(2, 3, 128, 512), (1, 3, 32, 256)])
def test_openvino_text_prior_matches_the_torch_route(converted, shape):
    """The text prior on OpenVINO (its encoder and greedy steps in the worker, the loop here) reads the ids of the
    torch route (fp32, incremental, stopped at END) and confidences within the qualification's bound."""
    _, ref_net, pipe, _ = converted
    assert isinstance(pipe.net.stage_runner, RoutedStages) and pipe.net.stage_runner.text
    lq = torch.rand(*shape, generator=torch.Generator().manual_seed(7 * shape[-1]))
    ids, probs = pipe.net.decode_text(lq)
    ref_ids, ref_probs = ref_net.decode_text(lq)
    assert torch.equal(ids, ref_ids)
    # float32 vs float32, two runtimes' kernels: measured 2.1e-7 here, 3.3e-6 on the demo model; the bound is 100x
    # the larger (docs/inference.md, "Qualification")
    within(
        qualification.relative_rms(probs, ref_probs), qualification.PRIOR_BOUND,
        f'OpenVINO vs torch text prior confidences, {tuple(shape)}')


def test_stage_timing_reports_the_text_prior_on_openvino(converted, monkeypatch):
    """The benchmark's 'text prior' column holds the prior's time on OpenVINO: the worker's encoder and decoder
    steps run inside it."""
    path, _, _, _ = converted
    worker_seconds = {'text': 0.0}
    real = openvino_client.OpenVINOWorker.run

    def timed(self, stage, *tensors, **kwargs):
        start = time.perf_counter()
        out = real(self, stage, *tensors, **kwargs)
        if stage in PRIOR_STAGES:
            worker_seconds['text'] += time.perf_counter() - start
        return out

    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', timed)
    pipe = TOLAPipeline.from_merged(path, backend='openvino', batch_size=1)
    try:
        timer = stage_timing.StageTimer(pipe.net)
        _, total, stages = stage_timing.restore(pipe.net, timer, torch.rand(1, 3, 128, 512))
    finally:
        pipe.close()
    assert 0.0 < worker_seconds['text'] <= stages['text prior'] <= total


def test_the_plan_gives_the_stages_their_precision(converted):
    """The precisions are the plan's, given to the worker when it starts (no stage reads torch's autocast state); a
    new precision is decided again (and qualified) through the pipeline; the plan names what OpenVINO compiled."""
    path, _, pipe, _ = converted
    fp32 = {stage: torch.float32 for stage in pipe.plan.dtypes}
    assert pipe.plan.dtypes == fp32 and set(pipe.runtime.worker.dtypes.values()) == {torch.float32}
    with pytest.raises(ValueError, match="placed network is its runtime's decision"):
        pipe.net.set_switches(precision='bf16')
    try:
        pipe.set_switches(precision='fp16')  # decided again: qualified here, or an error naming why not
        worker = pipe.runtime.worker
        assert worker.dtype_of('idm') == torch.float16 and worker.dtype_of('vae_decoder') == torch.float32
        assert pipe.plan.dtypes['idm'] == worker.compiled['idm']  # what it computes
        assert np.isfinite(pipe(np.zeros((32, 128, 3), np.uint8)).image).all()
    except serving.NoPathLeft as err:
        assert 'openvino fp16 (fp32: vae_decoder)' in str(err)
    finally:
        pipe.set_switches(precision='fp32')
    assert pipe.plan.dtypes == fp32


def test_converted_stages_are_reused(converted, monkeypatch):
    path, _, _, _ = converted
    monkeypatch.setattr(OVS.StageCache, 'build', lambda self, *a: pytest.fail('converted again'))
    pipe = TOLAPipeline.from_merged(path, backend='openvino', batch_size=1)  # keyed by the merged file's SHA-256
    assert np.isfinite(pipe(np.zeros((32, 128, 3), np.uint8)).image).all()
    pipe.close()
    cache = OVS.StageCache(file_sha256(path))
    assert cache.valid() and sorted(os.listdir(cache.folder)) == sorted(cache.files() + [OVS.MANIFEST])
    assert os.listdir(OVS.compiled_cache_dir())  # OpenVINO's own cache of the compiled stages


def test_the_conversion_sends_no_telemetry(converted):
    """OpenVINO's converter, left alone, writes a client id into ~/intel/ and posts usage events: the conversion
    child and the worker block its telemetry package, so the home folder they ran with stays empty."""
    home = os.path.join(os.path.dirname(converted[0]), 'home')
    assert os.path.isdir(home) and os.listdir(home) == []


def test_the_conversion_shows_its_progress_with_the_time_left(converted):
    """Converting is never a silent wait: a line before it, then (stderr not a terminal: a log) the bar's lines as
    the child converts each stage, weighted by the stage's parameters, with the time left, and the total at the
    end (what the module's conversion said)."""
    err = converted[3]
    assert 'converting TransOCR, the IDM and the VAE for OpenVINO once for this model' in err
    steps = [line for line in err.splitlines() if line.startswith('OpenVINO conversion: ')]
    assert [s.split('(')[1].split(' done')[0] for s in steps] == list(OVS.STAGES), err
    assert steps[-1].startswith('OpenVINO conversion: 100 %') and 'left' in steps[0], steps
    assert 'OpenVINO stages converted in' in err


def test_stale_or_corrupt_entries_are_found(tmp_path, monkeypatch):
    """An entry (here of stand-in files) is invalid when a weight file changed (same size: its hash, once its mtime
    moved), its XML changed even with the same size and mtime (always hashed), the manifest is cut short or of
    another version or format, or a stage is missing; ``ensure`` converts such an entry again."""
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    cache = OVS.StageCache('0' * 64)
    os.makedirs(cache.folder)
    for name in cache.files():
        with open(os.path.join(cache.folder, name), 'wb') as f:
            f.write(os.urandom(256))
    cache.write_manifest(cache.folder, 1.0)
    assert cache.valid()

    def flip(path, keep_mtime):
        stat = os.stat(path)
        data = bytearray(open(path, 'rb').read())
        data[len(data) // 2] ^= 0xFF
        with open(path, 'wb') as f:
            f.write(data)
        # the mtime set, kept or moved by a second: on a fast machine a rewrite within one tick of the filesystem's
        # clock (coarse on many kernels) would keep it by chance
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + (0 if keep_mtime else 10**9)))
        return data

    blob, xml = cache.path('vae_decoder')[:-len('xml')] + 'bin', cache.path('vae_encoder')
    flip(blob, keep_mtime=False)
    assert not cache.valid()
    flip(blob, keep_mtime=False)  # back to the original bytes
    cache.write_manifest(cache.folder, 1.0)
    flip(xml, keep_mtime=True)  # the XML corrupted with the same size and mtime
    assert not cache.valid()
    flip(xml, keep_mtime=True)
    assert cache.valid()
    manifest = os.path.join(cache.folder, OVS.MANIFEST)
    good = open(manifest, encoding='utf-8').read()
    for broken in ('{"format": ', json.dumps(dict(json.loads(good), openvino='0.0')),
                   json.dumps(dict(json.loads(good), format='other/1'))):
        with open(manifest, 'w', encoding='utf-8') as f:
            f.write(broken)  # cut short, another OpenVINO version, another format
        assert not cache.valid()
    with open(manifest, 'w', encoding='utf-8') as f:
        f.write(good)
    os.remove(cache.path('idm'))
    assert not cache.valid()  # a stage missing
    builds = []
    monkeypatch.setattr(OVS.StageCache, 'build', lambda self, source: builds.append(source))
    cache.ensure('source')
    assert builds == ['source']


def test_other_weights_get_their_own_entry(converted, tmp_path):
    """A merged file with other values is another key: never the stale stages of the first."""
    path, _, _, _ = converted
    other = tmp_path / 'other.safetensors'
    net = TOLANet.from_merged(path)
    with torch.no_grad():
        net.lrc.conv_out.weight.add_(0.01)
    net.save_merged(str(other))
    assert file_sha256(str(other)) != file_sha256(path)


def test_backend_resolution(monkeypatch):
    cpu, gpu = torch.device('cpu'), torch.device('cuda', 0)
    notes = []
    assert serving.resolve_backends('auto', cpu, notes) == ['openvino', 'torch']  # installed (requirements.txt)
    assert serving.resolve_backends('openvino', cpu, notes) == ['openvino']
    assert serving.resolve_backends('torch', cpu, notes) == ['torch']
    assert serving.resolve_backends('auto', gpu, notes) == ['torch'] and notes == []
    with pytest.raises(ValueError, match='openvino runs on the CPU'):
        serving.resolve_backends('openvino', gpu, notes)
    with pytest.raises(ValueError, match='backend must be one of'):
        serving.resolve_backends('onnxruntime', cpu, notes)
    monkeypatch.setattr(OVS, 'openvino_missing', lambda: 'openvino is not installed (test)')
    assert serving.resolve_backends('auto', cpu, notes) == ['torch']  # passed over, saying why
    assert notes == [('openvino', 'openvino is not installed (test)')]
    with pytest.raises(ValueError, match='openvino is not installed'):
        serving.resolve_backends('openvino', cpu, notes)


class _StandIn(torch.nn.Module):
    """Stands in for an inference TOLANet on a simulated GPU: records .to(); its precision switch, stages and stage
    runner (``TOLANet.running``)."""

    def __init__(self, precision='fp32'):
        super().__init__()
        self.moves, self.precision, self.stage_runner = [], precision, None
        self.idm = self.vae = self.transocr = torch.nn.Identity()

    running = TOLANet.running

    def to(self, device):
        self.moves.append(torch.device(device))
        return self


def test_device_backend_precision_and_tf32_are_decided_in_one_place(monkeypatch):
    """CUDA simulated: the default device is the GPU, TF32 is off unless asked for, backend auto is torch there, and
    the plan (one object) says it, the reason included."""
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        net = _StandIn()
        runtime = serving.Runtime(net)
        assert runtime.device == torch.device('cuda') and net.moves == [runtime.device]
        assert net.stage_runner.dtypes == runtime.plan.dtypes and net.stage_runner.name == 'torch fp32'
        assert (runtime.plan.backend, runtime.plan.precision) == ('torch', 'fp32')
        assert runtime.plan.describe() == ('runtime: cuda, torch fp32 (asked backend auto, precision fp32): the plain '
                                           'fp32 torch route')
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        serving.Runtime(_StandIn(), 'cuda:1', allow_tf32=True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        with pytest.raises(ValueError, match='openvino runs on the CPU'):
            serving.Runtime(_StandIn(), 'cuda', 'openvino')
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert resolve_device(None) == torch.device('cpu')
    with pytest.raises(ValueError, match='CUDA is not available'):
        resolve_device('cuda')
    with pytest.raises(ValueError, match="device 'gpu'"):
        resolve_device('gpu')


def test_pipeline_uses_openvino_on_the_cpu_by_default(converted):
    path, _, _, _ = converted
    pipe = TOLAPipeline.from_merged(path, batch_size=2)
    assert pipe.backend == 'openvino' and pipe.plan.backend == 'openvino' and pipe.device == torch.device('cpu')
    plain = TOLAPipeline.from_merged(path, backend='torch', batch_size=2)
    assert plain.backend == 'torch' and plain.plan.path.plain
    line = np.random.default_rng(0).integers(0, 256, (32, 300, 3), dtype=np.uint8)
    a, b = pipe(line, names=['l.png']), plain(line, names=['l.png'])
    assert a.lines[0].window_texts == b.lines[0].window_texts
    assert np.abs(a.image.astype(int) - b.image.astype(int)).max() <= 1  # within the parity bound above
    pipe.close()


def test_batch_size_follows_the_free_memory(converted, monkeypatch):
    _, ref_net, _, _ = converted
    per_window = batching.window_bytes(ref_net)
    assert per_window == batching.WINDOW_ACTIVATIONS * ref_net.vae.config.block_out_channels[0] * 128 * 512 * 4
    for free, expected in ((0, 1), (3 * per_window, 1), (7 * per_window, 3), (10**15, batching.MAX_AUTO_BATCH)):
        monkeypatch.setattr(batching, 'free_memory', lambda device, free=free: free)
        assert batching.auto_batch_size(ref_net, torch.device('cpu')) == expected
    pipe = TOLAPipeline(ref_net)  # free memory still the last value above
    assert pipe.batch_size == batching.MAX_AUTO_BATCH and TOLAPipeline(ref_net, batch_size=3).batch_size == 3
    with pytest.raises(ValueError, match='batch_size'):
        TOLAPipeline(ref_net, batch_size=0)


class _Request:
    """Stands in for an OpenVINO infer request: its output is twice its first input."""

    def infer(self, inputs):
        return [inputs[0] * 2]


def test_each_stage_compiles_as_one_stream_in_its_precision():
    """One stream with every thread on each request (OpenVINO's throughput streams were removed: docs/inference.md,
    "Folders: one stream"), each stage in the precision its parent asks; a run is one request's first output as a
    float32 copy."""
    base = {'hints': {'text_decoder': 'f32', 'idm': 'bf16'}, 'threads': 2}
    assert openvino_worker.compile_config(base, 'idm') == {
        'INFERENCE_PRECISION_HINT': 'bf16', 'INFERENCE_NUM_THREADS': 2, 'NUM_STREAMS': 1, 'PERFORMANCE_HINT': 'LATENCY'
    }
    assert openvino_worker.compile_config(base, 'text_decoder')['INFERENCE_PRECISION_HINT'] == 'f32'
    x = np.arange(14, dtype=np.float64).reshape(7, 2)
    out = openvino_worker.run_stage(_Request(), [x, np.arange(7)])
    assert out.dtype == np.float32 and np.array_equal(out, x * 2)
