"""Every fast path proves itself on this machine (tola_plugin/runtime): qualification in a child process, its cached
verdict, the fallback order, and what happens when a path is broken — simulated here, so that these tests hold on a
CPU whose OpenVINO (or torch bf16) really is broken: a stage that returns NaN, a text prior that reads other ids, a
worker that dies by SIGSEGV or hangs, a path that fails while serving, no path left, a cache folder that cannot be
written."""
import json
import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.runtime import plan, qualification
from tola_plugin.runtime.child_process import ChildFailure, run_child
from tola_plugin.runtime.openvino_backend import client as openvino_client
from tola_plugin.runtime.openvino_backend import stages as openvino_stages
from tola_plugin.runtime.serving import NoPathLeft
from conftest import REPO
from inference_testing import write_tiny_merged
from tola_testing import one_thread  # noqa: F401

pytestmark = [pytest.mark.usefixtures('one_thread'), pytest.mark.openvino]
FAILING_WORKER = os.path.join(REPO, 'tests', 'data', 'runtime', 'failing_worker.py')
BROKEN = []  # why OpenVINO fp32 does not qualify on this machine, if it does not
LINE = np.random.default_rng(0).integers(0, 256, (32, 128, 3), dtype=np.uint8)  # 1:4, one window


@pytest.fixture(scope='module')
def model(tmp_path_factory):
    """A tiny merged model, converted to OpenVINO once for the module (the shared test cache keeps the IR); and
    whether OpenVINO fp32 really qualifies on this machine (None) or why not."""
    path = write_tiny_merged(tmp_path_factory.mktemp('qualify') / 'tiny_merged.safetensors')
    try:
        TOLAPipeline.from_merged(path, backend='openvino', batch_size=1).close()
        BROKEN.clear()
    except NoPathLeft as err:
        BROKEN[:] = [str(err)]
    return path


@pytest.fixture
def serving(model):
    """For tests that need a working OpenVINO fp32 path (to break it while it serves, or to compare with it): they
    are skipped, with the verdict, on a machine where OpenVINO fp32 does not qualify (its fallback is what the other
    tests check)."""
    if BROKEN:
        pytest.skip(f'OpenVINO fp32 does not qualify on this machine: {BROKEN[0]}')


@pytest.fixture
def verdicts(tmp_path, monkeypatch):
    """A verdict cache of the test's own (the IR and compiled caches stay shared); returns its path."""
    path = tmp_path / 'qualification.json'
    monkeypatch.setattr(qualification.CACHE, 'path', lambda: str(path))
    monkeypatch.setattr(qualification.CACHE, 'memory', {})
    return path


@pytest.fixture
def bf16_first(monkeypatch):
    """'auto' tries the VAE decoder in bf16 first on this CPU (as where bf16 measured faster), whatever this CPU is:
    the one low-precision stage the tiny random model qualifies in (its IDM, random, makes ẑ0 amplified noise: the
    VAE encoder's bf16 error moves it by its whole size)."""
    monkeypatch.setattr(plan, 'fast_dtypes', lambda device: dict({s: torch.float32
                                                                  for s in plan.NARROWING}, vae_decoder=torch.bfloat16))


def entries(path):
    return json.loads(path.read_text(encoding='utf-8'))['entries']


def nan_for(stage, dtype):
    """OpenVINOWorker.run that returns NaN for ``stage`` compiled in ``dtype`` (a broken kernel), the real output
    otherwise."""
    real = openvino_client.OpenVINOWorker.run

    def run(self, name, *tensors, **kwargs):
        out = real(self, name, *tensors, **kwargs)
        return torch.full_like(out, float('nan')) if name == stage and self.dtype_of(name) == dtype else out

    return run


def broken_text_prior(how):
    """OpenVINOWorker.run whose fp32 text decoder step returns NaN ('nan'), logits shifted by one class ('wrong ids':
    every id off by one, the confidences unchanged) or kills the worker ('dies', SIGSEGV)."""
    real = openvino_client.OpenVINOWorker.run

    def run(self, name, *tensors, **kwargs):
        if name != 'text_decoder' or self.dtype_of(name) != torch.float32:
            return real(self, name, *tensors, **kwargs)
        if how == 'dies':
            os.kill(self.proc.pid, signal.SIGSEGV)
        out = real(self, name, *tensors, **kwargs)
        return torch.full_like(out, float('nan')) if how == 'nan' else out.roll(1, -1)

    return run


LOW = 'openvino fp32 (bf16: vae_decoder)'  # what bf16_first makes 'auto' try first on OpenVINO


def test_auto_passes_over_a_path_that_returns_nan(model, serving, verdicts, bf16_first, monkeypatch, capsys):
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', nan_for('vae_decoder', torch.bfloat16))
    pipe = TOLAPipeline.from_merged(model, switches={'precision': 'auto'}, batch_size=1)
    try:
        assert (pipe.plan.backend, pipe.plan.precision) == ('openvino', 'fp32')  # the next path
        assert pipe.plan.passed_over[0][0] == LOW and 'vae_decoder: non-finite' in pipe.plan.passed_over[0][1]
        err = capsys.readouterr().err
        notes = [line for line in err.splitlines() if f'{LOW} is not used' in line]
        assert len(notes) == 1 and 'non-finite' in notes[0] and '--requalify' in notes[0]  # one line: what, the way
        saved = entries(verdicts)
        bf16 = [v for k, v in saved.items() if 'openvino' in k and 'vae_decoder bf16 |' in k]
        fp32 = [v for k, v in saved.items() if 'openvino' in k and 'vae_decoder fp32 |' in k]
        assert len(bf16) == 1 and not bf16[0]['qualified'] and bf16[0]['errors']['vae_decoder'] == 'non-finite'
        assert len(fp32) == 1 and fp32[0]['qualified']
        assert np.isfinite(pipe(LINE).image).all()
    finally:
        pipe.close()
    # the next run reads the verdicts: no probe for either path
    monkeypatch.setattr(qualification, 'compare', lambda *a: pytest.fail('measured again'))
    again = TOLAPipeline.from_merged(model, switches={'precision': 'auto'}, batch_size=1)
    assert again.plan.path.name == 'openvino fp32' and 'cached' in again.plan.passed_over[0][1]
    again.close()


def test_explicit_request_of_a_disqualified_path_is_an_error(model, verdicts, monkeypatch):
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', nan_for('vae_decoder', torch.float32))
    with pytest.raises(NoPathLeft) as caught:
        TOLAPipeline.from_merged(model, backend='openvino', batch_size=1)
    message = str(caught.value)
    assert 'openvino fp32' in message and 'vae_decoder: non-finite' in message
    assert '--backend torch --precision fp32' in message and '--requalify' in message  # the ways out


@pytest.mark.parametrize('how, why', [('nan', 'text_prior: non-finite confidences'),
                                      ('wrong ids', 'text_prior: other ids than the fp32 torch route'),
                                      ('dies', 'died by SIGSEGV')])
def test_a_path_whose_text_prior_fails_is_passed_over(model, serving, verdicts, monkeypatch, capsys, how, why):
    """The text prior runs in the probe of an OpenVINO path: NaN, other ids or a worker dying in its decoder pass
    the path over (one line, remembered) and the next path serves."""
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', broken_text_prior(how))
    pipe = TOLAPipeline.from_merged(model, batch_size=1)
    assert pipe.plan.path.name == 'torch fp32' and why in pipe.plan.passed_over[0][1]
    notes = [line for line in capsys.readouterr().err.splitlines() if 'openvino fp32 is not used' in line]
    assert len(notes) == 1 and why in notes[0]
    assert np.isfinite(pipe(LINE).image).all()
    saved = [v for k, v in entries(verdicts).items() if 'openvino' in k]
    assert len(saved) == 1 and not saved[0]['qualified'] and why in saved[0]['reason']


def scaled_logits(dtypes, factor):
    """OpenVINOWorker.run whose text decoder step, where it was compiled in one of ``dtypes``, returns its logits times
    ``factor`` (1: unchanged; 0.9: the same ids, other confidences; -1: other ids); the real output otherwise."""
    real = openvino_client.OpenVINOWorker.run

    def run(self, name, *tensors, **kwargs):
        out = real(self, name, *tensors, **kwargs)
        return out * factor if name == 'text_decoder' and self.dtype_of(name) in dtypes else out

    return run


def test_the_text_prior_runs_in_fp32_on_a_low_precision_path(model, serving, verdicts, bf16_first, monkeypatch):
    """A bf16 path compiles its stages in bf16 and the text prior's stages in fp32 (what OpenVINO reports it
    compiled): a bf16 prior that would read other ids is never run."""
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', scaled_logits({torch.bfloat16}, -1.0))
    pipe = TOLAPipeline.from_merged(model, switches={'precision': 'auto'}, batch_size=1)
    try:
        assert pipe.plan.passed_over == ()
        assert (pipe.plan.requested or pipe.plan.path).name == LOW
        worker = pipe.runtime.worker
        assert worker.precisions['text_encoder'] == worker.precisions['text_decoder'] == 'f32'
        assert worker.dtype_of('vae_decoder') == torch.bfloat16 and worker.dtype_of('text_decoder') == torch.float32
        saved = [v for k, v in entries(verdicts).items() if 'vae_decoder bf16 |' in k]
        assert len(saved) == 1 and saved[0]['qualified'] and 'text prior in fp32' in saved[0]['reason']
        assert np.isfinite(pipe(LINE).image).all()
    finally:
        pipe.close()


def test_the_text_prior_is_held_to_the_fp32_bound_on_a_low_precision_path(model, serving, verdicts, bf16_first,
                                                                          monkeypatch):
    """The prior's confidences off by far less than bf16's bound but more than fp32's (logits x 0.9: the same ids)
    pass a bf16 path over: the prior is checked as what it is, fp32."""
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', scaled_logits({torch.float32}, 0.9))
    pipe = TOLAPipeline.from_merged(model, switches={'precision': 'auto'}, batch_size=1)
    try:
        assert pipe.plan.backend == 'torch'  # OpenVINO fp32 has the same (broken) prior
        why = dict(pipe.plan.passed_over)[LOW]
        error = float(why.split('confidences ')[1].split(' >')[0])
        bf16 = max(b[torch.bfloat16] for b in qualification.STAGE_BOUNDS.values() if torch.bfloat16 in b)
        assert qualification.PRIOR_BOUND < error < bf16  # within what a bf16 stage may show
        assert f'text_prior: relative error of the confidences {error:.2g} > {qualification.PRIOR_BOUND:g}' in why
    finally:
        pipe.close()


@pytest.mark.parametrize('mode, how', [('segv-on-load', 'died by SIGSEGV'), ('hang-on-load', 'hung'),
                                       ('error-on-load', 'bad IR')])
def test_a_worker_that_crashes_or_hangs_is_passed_over(model, verdicts, monkeypatch, capsys, mode, how):
    monkeypatch.setattr(openvino_client, 'WORKER', FAILING_WORKER)
    monkeypatch.setenv('FAILING_WORKER', mode)
    if mode == 'hang-on-load':  # only a worker that never answers meets the timeout: no healthy start races it
        monkeypatch.setitem(openvino_client.TIMEOUTS, 'load', 3.0)
    rebuilt, asked = [], []
    monkeypatch.setattr(openvino_stages.StageCache, 'remove', lambda self: rebuilt.append(1))  # keep the shared IR
    close = openvino_client.OpenVINOWorker.close
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'close',
                        lambda self, ask=True: asked.append(ask) or close(self, ask))
    pipe = TOLAPipeline.from_merged(model, batch_size=1)  # auto: OpenVINO fp32 fails to start -> torch
    assert pipe.plan.path.name == 'torch fp32' and how in pipe.plan.passed_over[0][1]
    assert rebuilt == [1]  # a cached entry that cannot be loaded is converted again once before giving up
    assert asked.count(False) == (2 if mode == 'hang-on-load' else 0)  # a hung worker is killed, not asked to exit
    assert np.isfinite(pipe(LINE).image).all()
    assert how in capsys.readouterr().err
    assert not [v for v in entries(verdicts).values() if v['qualified']]


def test_a_path_that_fails_while_serving_falls_back_and_is_remembered(model, serving, verdicts, capsys):
    plain = TOLAPipeline.from_merged(model, backend='torch', batch_size=1)
    expected = plain(LINE, names=['a.png']).image
    pipe = TOLAPipeline.from_merged(model, batch_size=1)
    assert pipe.plan.path.name == 'openvino fp32'
    os.kill(pipe.runtime.worker.proc.pid, signal.SIGSEGV)  # the worker crashes between two images
    out = pipe(LINE, names=['a.png'])
    assert pipe.plan.path.name == 'torch fp32' and 'SIGSEGV' in pipe.plan.passed_over[-1][1]
    assert np.array_equal(out.image, expected)  # the batch ran again on torch: the plain route's output
    assert 'failed while serving' in capsys.readouterr().err
    saved = [v for k, v in entries(verdicts).items() if 'openvino' in k]
    assert saved and not saved[0]['qualified'] and 'failed while serving' in saved[0]['reason']


@pytest.mark.parametrize('stage, what', [('vae_decoder', 'non-finite pixels'),
                                         ('text_decoder', 'non-finite text prior confidences')])
def test_nan_while_serving_is_judged_by_the_plain_route(model, serving, verdicts, monkeypatch, capsys, stage, what):
    plain = TOLAPipeline.from_merged(model, backend='torch', batch_size=1)
    expected = plain(LINE, names=['a.png'])
    pipe = TOLAPipeline.from_merged(model, batch_size=1)
    assert pipe.plan.path.name == 'openvino fp32'
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', nan_for(stage, torch.float32))
    out = pipe(LINE, names=['a.png'])
    assert np.array_equal(out.image, expected.image)  # the plain route's result, judged finite, is kept
    assert out.lines[0].token_confidences == expected.lines[0].token_confidences
    assert pipe.plan.path.name == 'torch fp32' and what in pipe.plan.passed_over[-1][1]
    assert 'failed while serving' in capsys.readouterr().err


def test_no_nonfinite_image_is_ever_written(model, serving, verdicts, monkeypatch, tmp_path, capsys):
    """NaN on every path (the input's fault): the image fails (reported, never written), the path stays; the folder
    run goes on and exits 1."""
    from tola_cli import infer
    real = TOLANet.forward

    def poisoned(self, lq, *args, **kwargs):
        out = real(self, lq, *args, **kwargs)
        bad = [i for i, s in enumerate(kwargs.get('noise_seeds') or []) if s == poisoned.seed]
        if isinstance(out, dict) and bad:
            out['image'][bad] = float('nan')
        return out

    folder, out_dir = tmp_path / 'in', tmp_path / 'out'
    folder.mkdir()
    for name in ('good.png', 'bad.png'):
        import cv2
        cv2.imwrite(str(folder / name), LINE)
    from tola_plugin.archs.tola_arch import image_noise_seed
    poisoned.seed = image_noise_seed('bad.png', 0)
    monkeypatch.setattr(TOLANet, 'forward', poisoned)
    status = infer.main(['-i', str(folder), '-o', str(out_dir), '--model', model, '--batch-size', '1'])
    assert status == 1
    assert sorted(os.listdir(out_dir)) == ['good.png', 'prior.csv']
    err = capsys.readouterr().err
    assert 'bad.png' in err and 'torch fp32 returned non-finite pixels' in err and 'nothing written' in err
    assert [v['qualified'] for v in entries(verdicts).values()] == [True]  # OpenVINO was not to blame


def test_unwritable_cache_runs_on_torch_and_says_so(model, monkeypatch, tmp_path, capsys):
    blocker = tmp_path / 'not_a_folder'
    blocker.write_text('x')
    monkeypatch.setenv('XDG_CACHE_HOME', str(blocker))  # the cache folder cannot be made
    monkeypatch.setattr(qualification.CACHE, 'memory', {})
    pipe = TOLAPipeline.from_merged(model, batch_size=1)
    assert pipe.plan.path.name == 'torch fp32' and 'cache folder cannot be written' in pipe.plan.passed_over[0][1]
    assert 'XDG_CACHE_HOME' in capsys.readouterr().err
    assert np.isfinite(pipe(LINE).image).all()


def test_torch_low_precision_qualifies_in_a_child(model, verdicts, bf16_first, monkeypatch):
    """torch bf16 on a CPU qualifies in a child process (the real one here); a child that dies is a failed path."""
    pipe = TOLAPipeline.from_merged(model, switches={'precision': 'auto'}, backend='torch', batch_size=1)
    assert pipe.plan.path.name == 'torch fp32 (bf16: vae_decoder)' and 'qualified on this machine' in pipe.plan.reason
    assert pipe.net.stage_dtypes('cpu')['vae_decoder'] == torch.bfloat16 and np.isfinite(pipe(LINE).image).all()
    qualification.forget()
    monkeypatch.setattr('tola_plugin.runtime.torch_backend.python_command',
                        lambda module=None, script=None: [sys.executable, '-c', 'import os; os.abort()'])
    with pytest.raises(NoPathLeft, match='died by SIGABRT'):
        TOLAPipeline.from_merged(model, switches={'precision': 'bf16'}, backend='torch', batch_size=1)


def test_requalify_forgets_the_verdicts_of_the_model(model, serving, verdicts, monkeypatch):
    TOLAPipeline.from_merged(model, batch_size=1).close()
    assert [v['qualified'] for v in entries(verdicts).values()] == [True]
    probes = []
    real = qualification.compare
    monkeypatch.setattr(qualification, 'compare', lambda *a: probes.append(1) or real(*a))
    TOLAPipeline.from_merged(model, batch_size=1).close()
    assert probes == []
    TOLAPipeline.from_merged(model, batch_size=1, requalify=True).close()
    assert probes == [1]


def test_child_failures_are_named():
    with pytest.raises(ChildFailure, match=r'died by SIGSEGV \(signal 11\)'):
        run_child([sys.executable, '-c', 'import os, signal; os.kill(os.getpid(), signal.SIGSEGV)'], 'x', 60)
    with pytest.raises(ChildFailure, match='hung: still running after 1 s'):
        run_child([sys.executable, '-c', 'import time; time.sleep(60)'], 'x', 1)
    with pytest.raises(ChildFailure, match='exit status 3: boom') as caught:
        run_child([sys.executable, '-c', 'import sys; sys.stderr.write("boom"); sys.exit(3)'], 'x', 60)
    # raised in a pool's child (the benchmark's memory runs), it reaches the parent whole
    again = pickle.loads(pickle.dumps(caught.value))
    assert (type(again), str(again), again.what, again.how) == (ChildFailure, str(caught.value), 'x', caught.value.how)


def test_openvino_never_loads_into_the_users_process(model, serving):
    """OpenVINO runs in its worker only, so the crash of issue 23 (OpenVINO in process, then forked DataLoader
    workers) cannot happen: after an OpenVINO restore this process has no OpenVINO and forks loader workers."""
    code = f'''
import sys, numpy as np, torch
from torch.utils.data import DataLoader
from tola_plugin import TOLAPipeline
pipe = TOLAPipeline.from_merged({model!r}, batch_size=1)
assert pipe.backend == 'openvino', pipe.plan.describe()
pipe(np.zeros((32, 128, 3), np.uint8))
assert 'openvino' not in sys.modules, 'OpenVINO was imported into the user process'
batches = list(DataLoader(torch.arange(8.0), batch_size=2, num_workers=2, multiprocessing_context='fork'))
assert len(batches) == 4
print('ok')
'''
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert proc.returncode == 0 and proc.stdout.strip().endswith('ok'), proc.stderr[-3000:]


def test_show_runtime_prints_the_decision(model, serving, verdicts, capsys):
    from tola_cli import infer
    assert infer.main(['--show-runtime', '--model', model]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith('runtime: cpu, openvino fp32 (asked backend auto, precision fp32): qualified')


def test_each_stage_precision_is_part_of_the_verdict_key():
    """A verdict holds for one backend and one precision per stage: OpenVINO's and torch's keys differ, and so do two
    paths that differ in one stage's precision."""
    cpu, digest = torch.device('cpu'), 'ab' * 32
    openvino, torch_fp32 = plan.BackendPrecision.uniform('openvino', torch.float32), plan.BackendPrecision.uniform(
        'torch', torch.float32)
    keys = {
        qualification.verdict_key(cpu, openvino, digest),
        qualification.verdict_key(cpu, torch_fp32, digest),
        qualification.verdict_key(cpu, openvino.replace(vae_decoder=torch.bfloat16), digest)
    }
    assert len(keys) == 3 and all(key.endswith(qualification.FORMAT) and 'stream' not in key for key in keys)


# ------------------------------------------------------------- issue 43 item 4: a killed worker is not a verdict
def kill_worker_at(stage, calls, sig=signal.SIGKILL):
    """OpenVINOWorker.run that kills its worker (``sig``, as the OOM killer or a user would) just before the
    ``stage`` runs whose count (from 0, over the whole test) is in ``calls``; the real run otherwise."""
    real = openvino_client.OpenVINOWorker.run
    seen = []

    def run(self, name, *tensors, **kwargs):
        if name == stage:
            if len(seen) in calls:
                os.kill(self.proc.pid, sig)
                self.proc.wait()
            seen.append(1)
        return real(self, name, *tensors, **kwargs)

    return run


def test_a_worker_killed_from_outside_is_restarted_and_its_verdict_kept(model, serving, verdicts, monkeypatch, tmp_path,
                                                                        capsys):
    """kill -9 of the worker in the middle of a folder run: it is started again, the batch runs again, every image
    is restored on OpenVINO with the outputs of an undisturbed run, and the verdict stays 'qualified'."""
    from tola_plugin.inference.folder_run import restore_folder
    folder = tmp_path / 'in'
    folder.mkdir()
    import cv2
    for i in range(4):
        cv2.imwrite(str(folder / f'{i}.png'), np.random.default_rng(i).integers(0, 256, (32, 96, 3), dtype=np.uint8))
    calm = TOLAPipeline.from_merged(model, batch_size=2)
    assert restore_folder(str(folder), str(tmp_path / 'calm'), calm) == 0
    calm.close()
    capsys.readouterr()
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', kill_worker_at('idm', {1, 5}))  # in both batches, once
    pipe = TOLAPipeline.from_merged(model, batch_size=2)
    try:
        assert restore_folder(str(folder), str(tmp_path / 'killed'), pipe) == 0
        assert pipe.plan.path.name == 'openvino fp32' and pipe.runtime.restarts == 2
    finally:
        pipe.close()
    err = capsys.readouterr().err
    assert err.count('its worker was killed from outside (died by SIGKILL (signal 9)') == 2, err
    assert 'starting it again' in err and 'failed while serving' not in err
    for name in sorted(os.listdir(tmp_path / 'calm')):
        assert (tmp_path / 'calm' / name).read_bytes() == (tmp_path / 'killed' / name).read_bytes(), name
    assert [v['qualified'] for v in entries(verdicts).values()] == [True]


def test_a_worker_killed_again_on_the_same_batch_is_a_verdict(model, serving, verdicts, monkeypatch, capsys):
    TOLAPipeline.from_merged(model, batch_size=1).close()  # qualified (the verdict cached) before the kills
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', kill_worker_at('idm', set(range(100))))
    pipe = TOLAPipeline.from_merged(model, batch_size=1)
    out = pipe(LINE, names=['a.png'])
    assert np.isfinite(out.image).all() and pipe.plan.path.name == 'torch fp32'
    why = pipe.plan.passed_over[-1][1]
    assert 'died by SIGKILL' in why and 'again on the same windows after a restart' in why
    saved = [v for k, v in entries(verdicts).items() if 'openvino' in k]
    assert saved and not saved[0]['qualified'] and 'again on the same windows' in saved[0]['reason']
    assert 'starting it again (1 of at most 3)' in capsys.readouterr().err


def test_restarts_are_bounded_and_then_the_run_moves_on_without_a_verdict(model, serving, verdicts, monkeypatch,
                                                                          capsys):
    """Killed on every other batch (each batch once): restarted at most MAX_RESTARTS times; then this run goes on on
    torch, and the next run still finds OpenVINO qualified."""
    TOLAPipeline.from_merged(model, batch_size=1).close()  # qualified (the verdict cached) before the kills
    monkeypatch.setattr('tola_plugin.runtime.serving.MAX_RESTARTS', 2)
    real = openvino_client.OpenVINOWorker.run
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', kill_worker_at('idm', {0, 2, 4}))
    pipe = TOLAPipeline.from_merged(model, batch_size=1)
    lines = [np.random.default_rng(i).integers(0, 256, (32, 96, 3), dtype=np.uint8) for i in range(3)]
    outs = pipe(lines, names=['a.png', 'b.png', 'c.png'])
    assert all(np.isfinite(o.image).all() for o in outs)
    assert pipe.plan.path.name == 'torch fp32' and 'not remembered' in pipe.plan.passed_over[-1][1]
    assert pipe.runtime.restarts == 2
    assert [v['qualified'] for v in entries(verdicts).values()] == [True]
    pipe.close()
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', real)
    again = TOLAPipeline.from_merged(model, batch_size=1)
    assert again.plan.path.name == 'openvino fp32'
    again.close()


def test_a_worker_killed_while_loading_is_passed_over_for_this_run_only(model, verdicts, monkeypatch):
    monkeypatch.setattr(openvino_client, 'WORKER', FAILING_WORKER)
    monkeypatch.setenv('FAILING_WORKER', 'killed-on-load')
    pipe = TOLAPipeline.from_merged(model, batch_size=1)
    assert pipe.plan.path.name == 'torch fp32' and 'killed from outside while loading' in pipe.plan.passed_over[0][1]
    assert not verdicts.exists() or not [k for k in entries(verdicts) if 'openvino' in k]
    real_worker = os.path.join(os.path.dirname(openvino_client.__file__), 'worker.py')
    monkeypatch.setattr(openvino_client, 'WORKER', real_worker)
    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', kill_worker_at('idm', {0}))  # in the probe
    pipe = TOLAPipeline.from_merged(model, batch_size=1)
    assert 'killed from outside while qualifying; not remembered' in pipe.plan.passed_over[0][1]
    assert not verdicts.exists() or not [k for k in entries(verdicts) if 'openvino' in k]


def test_a_worker_killed_again_while_it_restarts_fails_each_image_by_name(model, serving, verdicts, monkeypatch,
                                                                          capsys):
    """Issue 48 item 5: under --backend openvino the worker killed, then killed again while it restarts, crashed the
    run (``AttributeError: 'NoneType' object has no attribute 'run'``: the later images ran on the dead worker). Each
    image now ends restored or named as failed, with the reason; no verdict is remembered."""
    TOLAPipeline.from_merged(model, batch_size=1).close()  # qualified (the verdict cached) before the kills
    pipe = TOLAPipeline.from_merged(model, backend='openvino', batch_size=1)
    assert pipe.plan.path.name == 'openvino fp32'

    def killed_while_loading(self, *args, **kwargs):  # every start from now on: killed from outside while loading
        raise ChildFailure('the OpenVINO worker (f32)', 'died by SIGKILL (signal 9)', -signal.SIGKILL)

    monkeypatch.setattr(openvino_client.OpenVINOWorker, 'run', kill_worker_at('idm', {0}))
    monkeypatch.setattr(openvino_client.OpenVINOWorker, '__init__', killed_while_loading)
    lines = [np.random.default_rng(i).integers(0, 256, (32, 96, 3), dtype=np.uint8) for i in range(3)]
    try:
        results = pipe.restore_each(lines, names=['a.png', 'b.png', 'c.png'])
        again = pipe.restore_each(lines[:1], names=['d.png'])  # a later call fails the same way, never on a dead worker
    finally:
        pipe.close()
    for result in results + again:
        assert isinstance(result, RuntimeError) and str(result).startswith('no output written: backend openvino'), \
            repr(result)
        assert 'died by SIGKILL' in str(result) and 'not remembered' in str(result), str(result)
    assert 'the worker could not start again: its worker was killed from outside while loading' in \
        capsys.readouterr().err
    assert [v['qualified'] for v in entries(verdicts).values()] == [True]
