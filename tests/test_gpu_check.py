"""The GPU check on the CPU (docs/training_gpus.md, "The GPU check").

``make gpu-carry`` writes what a lease that sends this checkout carries beside it (dependency wheels for CPython
3.10-3.12, rendered lines, the tests' fixture), and the checkout with it stays under 60 MiB; ``make gpu-bundle`` writes
one folder to copy anywhere. The dry run goes the way a GPU run goes on a bare image: from the checkout, with the
wheels installed into a private folder by ``tools/gpu_check.sh``, on the bare interpreter (this environment's packages
on PYTHONPATH stand in for the image's, without their .pth files), with no CJK font, the image's missing modules
hidden, and every step in its own process, the cuda tests' bodies run on the CPU. The verdicts can fail: each is fed
here what a broken GPU run would give."""
import fcntl
import glob
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import zipfile

import pytest
import torch
from packaging.utils import parse_wheel_filename

from tola_lab.gpu_check import bundle as B
from tola_lab.gpu_check import cuda_tests_step as C
from tola_lab.gpu_check import environment as E
from tola_lab.gpu_check import inference_step as infer_step
from tola_lab.gpu_check import memory_step as M
from tola_lab.gpu_check import precision_step as P
from tola_lab.gpu_check import report as R
from tola_lab.gpu_check import resume_step as S
from tola_lab.gpu_check import run as G
from tola_plugin.utils import process_tree
import conftest
from tola_testing import REPO

sys.path.insert(0, os.path.join(REPO, 'tools'))
import gpu_bundle  # noqa: E402  (tools/gpu_bundle.py)
import gpu_check  # noqa: E402  (tools/gpu_check.py)

EMPTY_FONTCONFIG = '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig></fontconfig>\n'


def shared_build(tmp_path_factory, worker_id, name, target):
    """``make <target>`` into a folder shared by the test workers of this session, built once under a lock (wheels
    fetched once into the tests' user cache)."""
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == 'master' else base.parent  # the parent: the same for every xdist worker
    out = shared / name
    with open(shared / f'{name}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / 'MANIFEST.json').exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith(('PYTEST_', 'MAKE'))}
            variable = 'GPU_CARRY' if target == 'gpu-carry' else 'GPU_BUNDLE'
            proc = subprocess.run(['make', '-s', target, f'{variable}={out}'], cwd=REPO, capture_output=True, text=True,
                                  timeout=900, env=env)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope='module')
def carry(tmp_path_factory, worker_id):
    return shared_build(tmp_path_factory, worker_id, 'gpu_carry', 'gpu-carry')


@pytest.fixture(scope='module')
def bundle(tmp_path_factory, worker_id):
    return shared_build(tmp_path_factory, worker_id, 'gpu_bundle', 'gpu-bundle')


def wheels_of(folder):
    return sorted(glob.glob(os.path.join(folder, 'wheels', '*.whl')))


def names_of(paths):
    return {parse_wheel_filename(os.path.basename(p))[0] for p in paths}


def hidden_fonts(tmp_path):
    path = tmp_path / 'fonts.conf'
    path.write_text(EMPTY_FONTCONFIG, encoding='utf-8')
    return str(path)


@pytest.mark.gpu_dry_run
def test_the_checkout_and_its_carry_fit_a_lease_with_wheels_for_each_python(carry):
    manifest = json.loads((carry / 'MANIFEST.json').read_text(encoding='utf-8'))
    total = manifest['checkout_bytes'] + sum(B.folder_bytes(str(carry)).values())
    assert manifest['mode'] == 'checkout' and total <= B.LIMIT_BYTES == 60 * 2**20, total / 2**20
    assert manifest['checkout_bytes'] == B.checkout_bytes(REPO)
    wheels = wheels_of(str(carry))
    assert names_of(wheels) == {B.canonicalize_name(n) for n in B.WHEELS}  # no wheel of the package: it is here
    for name in ('lmdb', 'rapidfuzz'):  # tied to CPython's ABI: one for each Python of CUDA PyTorch images
        for version in B.PYTHON_VERSIONS:
            fits = [w for w in wheels if names_of([w]) == {name} and B.wheel_fits(os.path.basename(w), version)]
            assert len(fits) == 1, (name, version, wheels)
    for entry in manifest['wheels']:
        path = carry / 'wheels' / entry['file']
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry['sha256']
    assert manifest['tested_versions']['torch'] == torch.__version__.split('+')[0]
    for phase, (lines, _) in B.FIXTURE_LINES.items():  # the tests' fixture, for a machine without a CJK font
        fixture = carry / B.FIXTURE / phase
        assert len((fixture / 'labels.tsv').read_text(encoding='utf-8').splitlines()) == lines
        assert len(os.listdir(fixture / 'hr')) == len(os.listdir(fixture / 'lr_x4')) == lines
    for phase, lines in (('train', B.TRAIN_LINES), ('val', B.VAL_LINES)):
        assert len((carry / 'data' / phase / 'labels.tsv').read_text(encoding='utf-8').splitlines()) == lines


@pytest.mark.gpu_dry_run
def test_the_bundle_is_under_its_limit_and_its_wheels_install_for_this_python(bundle, tmp_path):
    manifest = json.loads((bundle / 'MANIFEST.json').read_text(encoding='utf-8'))
    assert manifest['bytes'] < sum(B.folder_bytes(str(bundle)).values()) <= B.LIMIT_BYTES
    wheels = wheels_of(str(bundle))
    assert names_of(wheels) == {B.canonicalize_name(n) for n in E.BUNDLED_MODULES}
    assert not {'torch', 'torchvision', 'numpy', 'opencv-python', 'opencv-python-headless'} & names_of(wheels)
    for name in ('gpu_check.sh', 'tools/gpu_check.py', 'setup.cfg', 'requirements.txt', 'tests/test_cuda.py',
                 'options/train/train_TOLA.yml', f'{B.FIXTURE}/train/labels.tsv'):
        assert (bundle / name).is_file(), name
    with zipfile.ZipFile(next(w for w in wheels if 'tola_plugin' in w)) as whl:  # the package, demo model, hook, lab
        assert {
            'tola_plugin/assets/demo/backbone/difftsr_demo.safetensors', 'tola_plugin_hook.pth',
            'tola_lab/gpu_check/step_child.py', 'tola_lab/gpu_check/image_stand_in/sitecustomize.py',
            'tola_cli/infer.py'
        } <= set(whl.namelist())
    here = f'{sys.version_info[0]}.{sys.version_info[1]}'
    mine = [w for w in wheels if B.wheel_fits(os.path.basename(w), here)]
    assert names_of(mine) == names_of(wheels)  # one of each for this Python too
    target = tmp_path / 'site'
    install = [sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--target', str(target)]
    proc = subprocess.run(install + mine, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    code = ('import importlib, json, sys\n'
            'print(json.dumps({m: importlib.import_module(m).__file__ for m in sys.argv[1:]}))')
    modules = ['tola_plugin', 'tola_lab', 'tola_cli'] + sorted(set(E.BUNDLED_MODULES.values()) - {'tola_plugin'})
    proc = subprocess.run([sys.executable, '-c', code, *modules], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(target), TOLA_PLUGIN_HOOK='0'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(path.startswith(str(target)) for path in files.values()), files


def test_pythons_chooses_the_versions_whose_abi_wheels_travel(tmp_path, monkeypatch):
    """``--pythons 3.12`` (``make gpu-carry GPU_PYTHONS=3.12``): lmdb's wheel for CPython 3.12 alone is fetched and
    carried, though the cache holds those for 3.10 and 3.11 (pip replaced: no network)."""
    assert gpu_bundle.parse_args([]).pythons == gpu_bundle.PYTHONS == B.PYTHON_VERSIONS
    assert gpu_bundle.parse_args(['--pythons', '3.12, 3.10']).pythons == ('3.10', '3.12')
    for bad in ('3.9', '3.12,3.13', ','):
        with pytest.raises(SystemExit):
            gpu_bundle.parse_args(['--pythons', bad])
    cache, fetched = tmp_path / 'cache', []
    cache.mkdir()
    for tag in ('cp310', 'cp311'):
        (cache / f'lmdb-1.7.5-{tag}-{tag}-manylinux_2_17_x86_64.whl').write_bytes(b'')
    (cache / 'zhconv-1.4.3-py3-none-any.whl').write_bytes(b'')

    def download(name, spec, python, folder):
        fetched.append((name, spec, python))
        tag = B.python_tag(python)
        (cache / f'{name}-1.7.5-{tag}-{tag}-manylinux_2_17_x86_64.whl').write_bytes(b'')

    monkeypatch.setattr(B, '_download', download)
    monkeypatch.setattr(B, 'installed_version', {'lmdb': '1.7.5', 'zhconv': '1.4.3'}.get)
    monkeypatch.setattr(B, 'WHEELS', {'lmdb': 'binary', 'zhconv': 'sdist'})
    monkeypatch.setattr(B, 'write_data', lambda out: None)
    monkeypatch.setattr(B, 'checkout_bytes', lambda root: 0)
    monkeypatch.setattr(B, 'tested_versions', dict)
    out = tmp_path / 'carry'
    argv = ['--checkout', '--out', str(out), '--wheel-cache', str(cache), '--pythons', '3.12']
    assert gpu_bundle.main(argv) == 0
    assert fetched == [('lmdb', '==1.7.5', '3.12')]
    assert sorted(os.listdir(
        out / 'wheels')) == ['lmdb-1.7.5-cp312-cp312-manylinux_2_17_x86_64.whl', 'zhconv-1.4.3-py3-none-any.whl']
    assert json.loads((out / 'MANIFEST.json').read_text(encoding='utf-8'))['pythons'] == ['3.12']


def bare_environment(tmp_path, carry, **extra):
    """The environment of a run on a bare image: this environment's packages on PYTHONPATH (no .pth of theirs runs:
    no import hook, no editable finder), no CJK font, the carry and a private folder of the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(('PYTEST_', 'VIRTUAL_ENV'))}
    env.update(PYTHON=sys._base_executable, PYTHONPATH=sysconfig.get_paths()['purelib'],
               FONTCONFIG_FILE=hidden_fonts(tmp_path), TOLA_GPU_CHECK_CARRY=str(carry),
               TOLA_GPU_CHECK_SITE=str(tmp_path / 'site'), **extra)
    return env


@pytest.mark.gpu_dry_run
def test_gpu_check_dry_run_from_the_checkout_on_a_bare_interpreter_without_fonts(carry, tmp_path):
    """Every step passes. The deadline and the timeout only guard against a hang: the dry run took 813 s on a 2-core
    machine at load 6, and on a more loaded one the last steps would not fit a deadline near that."""
    report = tmp_path / 'report'
    proc = subprocess.run([
        'bash',
        os.path.join(REPO, 'tools', 'gpu_check.sh'),
        str(report), '--dry-run', '--work',
        str(tmp_path / 'work'), '--deadline', '15000'
    ], capture_output=True, text=True, timeout=18000, env=bare_environment(tmp_path, carry))
    result = json.loads((report / 'gpu_check.json').read_text(encoding='utf-8'))
    failed = {k: v.get('error') or v.get('skipped') or v for k, v in result['steps'].items() if not v.get('passed')}
    assert proc.returncode == 0 and not failed, (failed, proc.stderr[-3000:])
    steps = result['steps']
    assert list(steps) == list(G.DEFAULT_STEPS)  # demo_model only when asked for (tests/test_gpu_demo_model.py)
    outcomes = steps['cuda_tests']['outcomes']  # the bodies ran, on the CPU, from the carried fixture
    assert len(outcomes) == C.EXPECTED and sum(o == 'passed' for o in outcomes.values()) == 8, outcomes
    assert steps['resume']['resumed_from_iteration'] == ['2'] and steps['resume']['weights']['differ'] == 0
    assert steps['resume']['moved_after_resume_point']['differ'] > 0
    shared = steps['shared_gpu']  # on the CPU: gloo, two ranks, then refused to one in one line
    assert shared['resumed_from_iteration'] == ['2'] and shared['refused_one_rank']
    assert len(shared['one_rank_said']) == 1
    assert [(r['precision'], r['tf32'], len(r['gradient_checkpointing']))
            for r in steps['memory']['rows']] == [(p, t, len(c)) for p, t, c in M.CONFIGS]
    assert {r['stage'] for r in steps['precision']['rows']} == {'idm', 'vae_encoder', 'vae_decoder', 'route'}
    assert 'l_lpips' in steps['smoke']['losses']  # LPIPS-VGG (random trunk) in the smoke step, even on the CPU
    rows = {r['precision']: r for r in steps['inference']['rows']}
    assert list(rows) == ['fp32', 'auto'] and rows['auto']['plan'].startswith('torch ') and rows['auto']['within_bound']
    speed = steps['inference']['speed']  # every row ran, batches 1 and 2, finite
    assert [r['row'] for r in speed][-len(infer_step.VARIANTS):] == [f'auto + {v}' for v in infer_step.VARIANTS]
    assert all(r['finite'] and [b['batch'] for b in r['batches']] == [1, 2] for r in speed), speed
    assert [r['model'] for r in steps['inference']['first_result']] == ['merged.safetensors', 'demo_frozen.safetensors']
    origins = result['distributions']
    assert origins['tola_plugin']['origin'] == 'checkout' and origins['diffusers']['origin'] == 'carry'
    assert origins['torch']['origin'] == 'image' and origins['torch']['tested'] == origins['torch']['version']
    markdown = (report / 'gpu_check.md').read_text(encoding='utf-8')
    assert markdown.startswith('# TOLA GPU check (dry run') and '| 5. Tests marked cuda | passed |' in markdown
    assert '## Not tested here' in markdown and 'NCCL' in markdown


def test_without_a_gpu_the_check_stops_naming_why(tmp_path):
    assert gpu_check.main([str(tmp_path / 'report'), '--bundle', REPO, '--work', str(tmp_path / 'work')]) == 1
    result = json.loads((tmp_path / 'report' / 'gpu_check.json').read_text(encoding='utf-8'))
    assert result['steps']['smoke']['error'].startswith('no usable GPU: ')
    assert 'no usable GPU' in (tmp_path / 'report' / 'gpu_check.md').read_text(encoding='utf-8')


def test_the_help_shows_the_deadline_and_the_steps():
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'tools', 'gpu_check.py'), '--help'], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and '--deadline' in proc.stdout and '--steps' in proc.stdout
    assert (gpu_check.STEPS, gpu_check.DEFAULT_STEPS) == (G.STEPS, G.DEFAULT_STEPS)  # the tool parses first: the same
    with pytest.raises(SystemExit):
        gpu_check.parse_args(['out', '--steps', 'smoke,nonsense'])


def test_every_step_has_its_process_its_estimates_and_its_report_section():
    """A step added to STEPS but not wired would fail only on a lease: each has its call in the step's process, its
    estimate on a GPU and in a dry run, and its title and section in the report."""
    from tola_lab.gpu_check.step_child import step_functions
    for wired in (step_functions('root', 'data', 'work',
                                 True), G.ESTIMATES_S, G.DRY_RUN_ESTIMATES_S, R.STEP_TITLES, R.SECTIONS):
        assert set(wired) == set(G.STEPS), set(wired) ^ set(G.STEPS)


class HandClock:
    """A monotonic clock that moves only when the test moves it (``now``): a deadline test's outcome does not depend on
    how fast the machine is."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_steps_whose_estimate_does_not_fit_are_skipped_saying_why(tmp_path, monkeypatch):
    """On the check's clock, which only the test moves, each step run takes 1 s and the rest (the environment check,
    however slow the machine) none: the time left before the 60 s deadline, less the report's reserve, is 55 s at the
    first step and 1 s less after each step run."""
    clock, ran = HandClock(), []

    def run_step(name, *args, timeout, **kwargs):
        ran.append((name, timeout))
        clock.now += 1.0
        return {'passed': True}

    monkeypatch.setattr(G, 'run_step', run_step)
    estimates = dict(G.DRY_RUN_ESTIMATES_S, smoke=1, memory=10**6, precision=1, inference=1)
    monkeypatch.setattr(G, 'DRY_RUN_ESTIMATES_S', estimates)
    code = G.run_gpu_check(
        str(tmp_path / 'report'), REPO, dry_run=True, work=str(tmp_path / 'work'), deadline=60, clock=clock)
    steps = json.loads((tmp_path / 'report' / 'gpu_check.json').read_text(encoding='utf-8'))['steps']
    assert code == 1 and ran == [('smoke', 55), ('precision', 54), ('inference', 53)]  # each within the time left
    assert steps['memory']['skipped'] == 'needs about 1000000 s, 54 s left before the deadline of 60 s (--deadline)'
    assert steps['cuda_tests']['skipped'].startswith('needs about 120 s, 52 s left')
    assert steps['resume']['skipped'].startswith('needs about 60 s, 52 s left')  # the steps' time was counted


def test_a_failed_smoke_step_ends_the_check(tmp_path, monkeypatch):
    monkeypatch.setattr(G, 'run_step', lambda name, *a, **k: {'passed': name != 'smoke', 'error': 'broken'})
    assert G.run_gpu_check(str(tmp_path / 'r'), REPO, dry_run=True, work=str(tmp_path / 'w')) == 1
    steps = json.loads((tmp_path / 'r' / 'gpu_check.json').read_text(encoding='utf-8'))['steps']
    assert all(steps[s]['skipped'].startswith('the smoke step failed') for s in G.DEFAULT_STEPS[1:])


def wait_until(condition, what, seconds=300.0):
    """Poll ``condition`` until it holds; fail naming ``what`` after ``seconds`` (a guard against a hang, far above
    what a loaded machine needs)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f'no {what} after {seconds:.0f} s'
        time.sleep(0.05)


def test_a_step_past_its_time_is_killed_with_the_processes_it_started(tmp_path, monkeypatch):
    """A grandchild in a session of its own (as torchrun starts its workers) is killed too. The timeout runs from the
    moment the grandchild exists: a start slowed down by a loaded machine cannot use it up first."""
    pid_file = tmp_path / 'grandchild.pid'
    script = ('import subprocess, sys, time\n'
              'p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)\n'
              f'open({str(pid_file)!r}, "w").write(str(p.pid))\n'
              'time.sleep(3600)\n')
    communicate = subprocess.Popen.communicate

    def communicate_once_started(self, input=None, timeout=None):
        if timeout is not None:
            wait_until(lambda: (pid_file.exists() and pid_file.read_text()) or self.poll() is not None,
                       'grandchild PID')
        return communicate(self, input, timeout)

    monkeypatch.setattr(subprocess.Popen, 'communicate', communicate_once_started)
    start = time.monotonic()
    with pytest.raises(process_tree.TreeTimeout) as caught:
        process_tree.run_tree([sys.executable, '-c', script], timeout=3)
    assert time.monotonic() - start < 300  # killed, not waited for: the tree sleeps for an hour
    grandchild = int(pid_file.read_text())
    assert grandchild in caught.value.killed
    wait_until(lambda: not process_tree._alive(grandchild), 'end of the killed grandchild')


def test_a_killed_tree_whose_pipe_stays_open_is_not_waited_for(tmp_path, monkeypatch):
    """A grandchild that left the tree (its parent ended; a session of its own) holds the command's output: after the
    kill the wait is bounded, and TreeTimeout has what was read and says what was not waited for. The timeout runs
    once the parent has ended: a slow start cannot let the kill find the grandchild still below it."""
    pid_file = tmp_path / 'grandchild.pid'
    # the grandchild sleeps 600 s: a wait without bound would end then, and fail, not hang the tests
    script = ('import subprocess, sys\n'
              'p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)\n'
              'print("before the timeout", flush=True)\n'
              f'open({str(pid_file)!r}, "w").write(str(p.pid))\n')
    communicate = subprocess.Popen.communicate

    def communicate_once_orphaned(self, input=None, timeout=None):
        if timeout is not None:
            wait_until(lambda: pid_file.exists() and pid_file.read_text() and not process_tree._alive(self.pid),
                       'end of the parent')
        return communicate(self, input, timeout)

    monkeypatch.setattr(subprocess.Popen, 'communicate', communicate_once_orphaned)
    try:
        with pytest.raises(process_tree.TreeTimeout) as caught:
            process_tree.run_tree([sys.executable, '-c', script], timeout=1)
        grandchild = int(pid_file.read_text())
        assert process_tree._alive(grandchild) and grandchild not in caught.value.killed  # out of reach: escaped
        assert 'before the timeout' in caught.value.output
        assert 'stayed open' in caught.value.unfinished and caught.value.unfinished in str(caught.value)
    finally:
        if pid_file.exists() and pid_file.read_text() and process_tree._alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_signal_during_a_step_marks_it_interrupted_and_the_handlers_are_restored(tmp_path, monkeypatch):
    """The handler the check installs (called here as a signal would call it) ends the check: the step running is
    reported interrupted with its seconds on the check's clock, the rest not run; a SIGHUP ignored before (nohup)
    stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip('signal handlers are installed from the main thread only')
    clock, seen = HandClock(), {}

    def run_step(name, *args, **kwargs):
        seen.update(sigterm=signal.getsignal(signal.SIGTERM), sighup=signal.getsignal(signal.SIGHUP))
        clock.now += 2.0
        seen['sigterm'](signal.SIGTERM, None)

    monkeypatch.setattr(G, 'run_step', run_step)
    monkeypatch.setattr(G.environment, 'check_imports', lambda *args: {})
    before = signal.getsignal(signal.SIGTERM), signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        code = G.run_gpu_check(str(tmp_path / 'r'), REPO, dry_run=True, work=str(tmp_path / 'w'), clock=clock)
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == (before[0], signal.SIG_IGN)
    finally:
        signal.signal(signal.SIGHUP, before[1])
    assert code == 128 + signal.SIGTERM and seen['sigterm'] != before[0] and seen['sighup'] == signal.SIG_IGN
    result = json.loads((tmp_path / 'r' / 'gpu_check.json').read_text(encoding='utf-8'))
    steps = result['steps']
    assert result['interrupted'] == 'SIGTERM' and list(steps) == list(G.DEFAULT_STEPS)
    assert steps['smoke']['interrupted'] == 'SIGTERM' and steps['smoke']['step_seconds'] == 2.0
    assert all(steps[s]['skipped'].startswith('the check was interrupted by SIGTERM') for s in G.DEFAULT_STEPS[1:])


# A stand-in for step_child: starts a grandchild in a session of its own (as torchrun starts its workers), says so,
# writes both PIDs, and sleeps.
SLEEPING_STEP = """import os, subprocess, sys, time
work = sys.argv[sys.argv.index('--work') + 1]
grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'], start_new_session=True)
print('stand-in step: started', flush=True)
with open(os.path.join(work, 'pids.part'), 'w') as f:
    f.write(f'{os.getpid()} {grandchild.pid}')
os.replace(os.path.join(work, 'pids.part'), os.path.join(work, 'pids'))
time.sleep(3600)
"""
CHECK_WITH_SLEEPING_STEP = """import sys
from tola_lab.gpu_check import run as G
G.STEP_CHILD = 'sleeping_step'
G.environment.check_imports = lambda *args: {}
G.environment.machine = lambda: dict(python='3', torch='', torch_cuda=None, cuda_available=False, driver=None, gpus=[],
                                     cpu_count=1, cuda_unusable_reason=None)  # (no torch to import: a faster start)
sys.exit(G.run_gpu_check(sys.argv[1], sys.argv[2], dry_run=True, work=sys.argv[3], steps=['smoke', 'memory'],
                         deadline=3600))
"""


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_check_kills_the_running_step_and_reports_it_interrupted(tmp_path, signum):
    """SIGTERM or SIGHUP (a lease's command timeout) to the check while a step's tree (a grandchild in a session of its
    own) runs: the tree is killed, the report says the step was interrupted, the exit status is 128 + the signal's
    number. The signal goes once the step has written its PIDs."""
    (tmp_path / 'sleeping_step.py').write_text(SLEEPING_STEP, encoding='utf-8')
    report, work = tmp_path / 'report', tmp_path / 'work'
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), os.environ.get('PYTHONPATH')) if p))
    check = subprocess.Popen(  # the signal's default action in the check, whatever this process inherited (nohup)
        [sys.executable, '-c', CHECK_WITH_SLEEPING_STEP,
         str(report), REPO, str(work)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))
    pid_file, pids = work / 'smoke' / 'pids', []
    try:
        wait_until(lambda: pid_file.exists() or check.poll() is not None, 'PIDs from the stand-in step')
        assert check.poll() is None, check.communicate()
        pids = [int(p) for p in pid_file.read_text().split()]
        check.send_signal(signum)
        _, err = check.communicate(timeout=300)
        assert check.returncode == 128 + signum, err[-3000:]
        for pid in pids:
            wait_until(lambda: not process_tree._alive(pid), f'end of the step\'s process {pid}')
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
        for pid in pids:
            if process_tree._alive(pid):
                os.kill(pid, signal.SIGKILL)
    name = signal.Signals(signum).name
    result = json.loads((report / 'gpu_check.json').read_text(encoding='utf-8'))
    smoke, memory = result['steps']['smoke'], result['steps']['memory']
    assert result['interrupted'] == smoke['interrupted'] == name and not smoke['passed']
    assert 'stand-in step: started' in smoke['output_tail']
    assert memory['skipped'].startswith(f'the check was interrupted by {name}')
    markdown = (report / 'gpu_check.md').read_text(encoding='utf-8')
    assert f'| {R.STEP_TITLES["smoke"]} | INTERRUPTED by {name}' in markdown


@pytest.mark.gpu_dry_run
def test_the_private_folder_is_keyed_by_python_and_wheels(carry, tmp_path):
    """A folder installed by another Python or from other wheels (a dry run made in the bundle) is never reused."""
    site = tmp_path / 'site'
    site.mkdir()
    (site / '.installed').write_text('cp312-0000000000000000\n')
    run = ['bash', os.path.join(REPO, 'tools', 'gpu_check.sh'), '--help']
    env = dict(os.environ, PYTHON=sys.executable, TOLA_GPU_CHECK_CARRY=str(carry), TOLA_GPU_CHECK_SITE=str(site))
    first = subprocess.run(run, capture_output=True, text=True, env=env)
    again = subprocess.run(run, capture_output=True, text=True, env=env)
    tag = f'cp{sys.version_info[0]}{sys.version_info[1]}'
    assert first.returncode == 0 and 'installing' in first.stderr and 'installing' not in again.stderr
    assert (site / '.installed').read_text().startswith(tag + '-')
    assert (site / 'tola_plugin_hook.pth').is_file() and (site / 'sitecustomize.py').is_file()  # the import hook


@pytest.mark.gpu_dry_run
def test_a_python_without_its_abi_wheels_is_refused_naming_them(carry, tmp_path):
    fake = tmp_path / 'python3.9'
    fake.write_text('#!/bin/sh\necho cp39\n')
    fake.chmod(0o755)
    proc = subprocess.run(['bash', os.path.join(REPO, 'tools', 'gpu_check.sh'),
                           str(tmp_path / 'r')], capture_output=True, text=True,
                          env=dict(os.environ, PYTHON=str(fake), TOLA_GPU_CHECK_CARRY=str(carry)))
    assert proc.returncode == 2 and 'no lmdb wheel for cp39' in proc.stderr and 'cp312' in proc.stderr
    assert 'make gpu-carry GPU_PYTHONS=3.9;' in proc.stderr  # the command that builds a carry for this Python


def test_versions_other_than_tested_lead_the_report(tmp_path):
    dists = E.check_imports(['numpy', 'torch'], '', REPO, {'numpy': '0.0.1', 'torch': torch.__version__.split('+')[0]})
    assert dists['numpy']['differs'] and dists['numpy']['tested'] == '0.0.1' and not dists['torch']['differs']
    result = {
        'dry_run': True, 'started': 'now', 'command': 'x', 'seconds': 1.0, 'bundle': {}, 'machine': E.machine(),
        'steps': {}, 'distributions': dists, 'not_tested': list(G.NOT_TESTED)
    }
    head = R.markdown(result).split('| step |')[0]
    assert 'Versions other than the tests ran with' in head and '| numpy |' in head and '0.0.1' in head


def test_the_shared_gpu_step_reaches_the_report_with_what_one_rank_was_told():
    """Step 7's figures (``shared_gpu_step``) as the report shows them: passed or not, the sharing said, the resume
    point, and the one-process resume's own line quoted."""
    said = ['error: x/2.state: the training data changed since it was saved (num_replicas 2 then, 1 now; ...)']
    step = {
        'passed': True, 'devices': 1, 'backend': 'gloo', 'precision': 'bf16', 'gradient_checkpointing': ['idm'],
        'shared_said': True, 'resumed_from_iteration': ['2'], 'moved_after_resume_point': {'differ': 210},
        'refused_one_rank': True, 'one_rank_said': said, 'iterations': {'first': 2, 'resumed_to': 3}, 'runs': {
            'two ranks': {'seconds': 40.0}, 'two ranks resumed': {'seconds': 30.0},
            'one rank resumed': {'failed': True}
        }
    }
    result = {
        'dry_run': False, 'started': 'now', 'command': 'x', 'seconds': 1.0, 'bundle': {}, 'machine': E.machine(),
        'steps': {'shared_gpu': step}, 'distributions': {}, 'not_tested': list(G.NOT_TESTED)
    }
    text = R.markdown(result)
    assert '| 7. Two ranks on one GPU (gloo): DDP, resumed by two ranks, refused to one | passed |' in text
    assert 'they share the GPU: True' in text and '(from iteration 2; 210 tensors moved after it)' in text
    assert '    ' + said[0] in text and '| one rank resumed | failed |' in text
    assert 'shared_gpu' in G.DEFAULT_STEPS and 'out-of-memory error on one rank' in text


def test_the_image_s_distributions_are_listed_without_the_carry_s():
    """The report's JSON lists every distribution of the image (what a dry run's allowlist would start from)."""
    purelib = sysconfig.get_paths()['purelib']
    listed = E.image_distributions('', REPO)
    assert listed['torch'] == torch.__version__.split('+')[0] and 'pytest' in listed
    assert 'torch' not in E.image_distributions(purelib, REPO)  # as if this environment were the carry's folder


def test_the_dry_run_hides_every_installed_module_but_the_image_s(tmp_path):
    """An allowlist: the image's modules and what they require; the standard library, the carry and the checkout
    stay importable, an installed module the image lacks is absent (``find_spec`` gives None, as on the image)."""
    names = E.image_module_names()
    assert {'torch', 'numpy', 'yaml', 'requests', 'filelock'} <= set(names)  # requests: IMAGE_ALSO; filelock: torch's
    assert not {'openvino', 'gradio', 'pyiqa', 'onnxruntime'} & set(names)
    installed, carry, checkout = tmp_path / 'env/site-packages', tmp_path / 'carry/site-packages', tmp_path / 'repo'
    modules = {'on_image': installed, 'not_on_image': installed, 'carried': carry, 'mine': checkout}
    for module, folder in modules.items():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f'{module}.py').write_text('')
    code = ('import importlib.util, json, on_image, carried, mine\n'
            'print(importlib.util.find_spec("not_on_image"))\nimport not_on_image')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=str(checkout),
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, (G.STAND_IN, carry, installed))),
                                   TOLA_GPU_CHECK_IMAGE_MODULES='on_image', TOLA_GPU_CHECK_SITE=str(carry)))
    assert proc.stdout == 'None\n' and "No module named 'not_on_image'" in proc.stderr, proc.stderr


def test_rendered_sets_come_from_the_carry_where_no_font_can_render_them(tmp_path, monkeypatch):
    monkeypatch.setenv('FONTCONFIG_FILE', hidden_fonts(tmp_path))
    monkeypatch.delenv(conftest.PRERENDERED, raising=False)
    with pytest.raises(RuntimeError, match='no CJK font'):
        conftest.rendered_sets_in(tmp_path / 'a')
    source = tmp_path / 'fixture'
    for phase in ('train', 'val'):
        (source / phase / 'hr').mkdir(parents=True)
        (source / phase / 'labels.tsv').write_text('000001.png\tabc\n', encoding='utf-8')
    monkeypatch.setenv(conftest.PRERENDERED, str(source))
    sets = conftest.rendered_sets_in(tmp_path / 'b')
    assert sorted(sets) == ['train', 'val'] and os.path.isfile(os.path.join(sets['train'], 'labels.tsv'))


def memory_row(precision='fp32', tf32=False, parts=(), **figures):
    return dict(precision=precision, tf32=tf32, gradient_checkpointing=list(parts), batch=16, **figures)


def test_the_memory_verdict_needs_a_row_that_fits_and_no_other_failure():
    fits = dict(seconds_per_iteration=1.0, losses_finite=True)
    required = memory_row('fp32', False, M.REQUIRED[2], **fits)
    assert M.memory_verdict([memory_row(out_of_memory='OOM'), required])
    assert not M.memory_verdict(
        [memory_row(out_of_memory='OOM'),
         memory_row('fp32', False, M.REQUIRED[2], out_of_memory='OOM')])
    assert not M.memory_verdict([required, memory_row('bf16', error='RuntimeError: CUDA error: illegal address')])
    assert not M.memory_verdict([dict(required, losses_finite=False)])


def test_the_first_iteration_s_seconds_reach_the_report(monkeypatch):
    """A row as the memory step writes it (``measure``, on the CPU, a model that does nothing) fills the report's
    'first iteration s' column with the first iteration's seconds (cuDNN's trials on a GPU)."""

    class Net:

        def set_switches(self, precision):
            pass

        def set_gradient_checkpointing(self, parts):
            pass

    class Model:
        bare_net, output, log_dict = Net(), None, {'l_pix': torch.tensor(0.5)}
        optimizer_g = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

        def feed_data(self, batch):
            pass

        def optimize_parameters(self, step):
            pass

    monkeypatch.setattr(M.cuda_math, 'set_tf32', lambda allow: None)  # (CUDA's flags: left as they are)
    row = M.measure(Model(), {}, 'fp32', False, (), 3, torch.device('cpu'))
    assert row['first_iteration_seconds'] == row['all_seconds'][0]
    lines = R._memory({'device': 'cpu', 'estimate_seconds': 1.0, 'rows': [memory_row(**row)]})
    assert lines[-3].endswith('| first iteration s (cuDNN trials) |')
    assert lines[-1].split('|')[-2].strip() == str(row['first_iteration_seconds'])


def test_the_cuda_tests_pass_only_when_every_one_ran_and_passed():
    names = [f'test_{i}' for i in range(C.EXPECTED - 1)] + ['test_two_rank_nccl_ddp']
    results = dict({n: 'passed' for n in names}, test_two_rank_nccl_ddp='skipped: needs two GPUs')
    assert C.judge(results, dry_run=False) == []
    assert C.judge(dict(results, test_0='skipped: no native bf16'),
                   dry_run=False) == ['test_0: skipped: no native bf16']
    assert C.judge({n: 'passed' for n in names[:5]}, dry_run=False) == [f'5 tests ran, {C.EXPECTED} expected']
    assert C.judge(dict(results, test_1='error'), dry_run=False) == ['test_1: error']


def test_pytest_summaries_are_read():
    assert C.summary_counts('10/578 tests collected (568 deselected) in 4.40s') == {'collected': 10, 'deselected': 568}
    assert C.summary_counts('566 deselected, 10 errors in 4.40s') == {'deselected': 566, 'error': 10}
    assert C.summary_counts('8 passed, 1 skipped, 1 failed in 9.10s') == {'passed': 8, 'skipped': 1, 'failed': 1}


def test_the_resume_verdict_needs_weights_that_moved_after_the_resume_point():
    equal, moved = {'differ': 0}, {'differ': 12}
    assert S.resume_verdict(equal, moved, ['2'], 2, 1)
    assert not S.resume_verdict(equal, {'differ': 0}, ['2'], 2, 1)  # a run that changed nothing resumes "exactly"
    assert not S.resume_verdict({'differ': 1}, moved, ['2'], 2, 1)
    assert not S.resume_verdict(equal, moved, [], 2, 1)


def precision_ref(z0_shift=0.0, image=None):
    z_lr = torch.full((1, 3, 4, 4), 2.0)
    ref = {
        'z_lr': z_lr, 'z_hr': z_lr + 1.0, 'eps_hat': torch.zeros_like(z_lr), 'z0': torch.zeros_like(z_lr),
        'image': torch.full((1, 3, 16, 16), 0.5)
    }
    got = {'eps_hat': ref['eps_hat'], 'z0': ref['z0'] + z0_shift, 'image': ref['image'] if image is None else image}
    return ref, got


def test_a_precision_row_is_judged_on_z0_and_on_the_image_before_the_clamp():
    ref, got = precision_ref(z0_shift=0.2)  # 10 % of |z_LR|: a bf16-sized error in the IDM
    row = P.compare(ref, got)
    assert math.isclose(row['z0_of_z_lr'], 0.1, rel_tol=1e-6) and not P.within(row, P.BOUNDS['fp16'])
    assert P.within(P.compare(*precision_ref(z0_shift=0.02)), P.BOUNDS['fp16'])
    inf_image = torch.full((1, 3, 16, 16), 0.5)
    inf_image[0, 0, 0, 0] = math.inf  # clamped, it would be 1.0 and pass
    row = P.compare(*precision_ref(image=inf_image))
    assert not row['finite'] and not P.within(row, None)


def test_the_fidelity_bound_fails_a_gpu_that_computes_another_route():

    class Route(torch.nn.Module):

        def forward(self, lq, noise_seeds=None):
            return lq * 0.5

    lq = torch.rand(1, 3, 8, 8)
    assert P.fidelity(Route(), lq, lq * 0.5)['passed']
    assert not P.fidelity(Route(), lq, lq * 0.5 + 4 * P.FIDELITY_BOUND)['passed']


def test_downloads_are_refused_without_pyiqa(monkeypatch):
    """The GPU image has no pyiqa (an evaluation extra): LPIPS-VGG's loss still builds with downloads refused."""
    import torch.hub

    from tola_plugin import metric_weights as W
    monkeypatch.setitem(sys.modules, 'pyiqa', None)
    monkeypatch.setitem(sys.modules, 'pyiqa.utils', None)
    real = torch.hub.download_url_to_file
    with W.no_downloads():
        with pytest.raises(RuntimeError, match='refusing to download'):
            torch.hub.download_url_to_file('https://example.com/x.pth', '/tmp/x')
    assert torch.hub.download_url_to_file is real


def test_the_cuda_tests_stop_before_their_step_and_say_which_ran(tmp_path, monkeypatch):
    """pytest gets the step's time less a margin, so a run that outlasts it is stopped by the step itself and reports
    the tests done so far (-v: one line each), where a kill from outside would report nothing (as on 2026-11-30)."""
    from tola_plugin.utils.process_tree import TreeTimeout
    seen = {}

    def slow(args, timeout, **kwargs):
        seen.update(args=args, timeout=timeout)
        raise TreeTimeout(args, timeout, 'tests/test_cuda.py::test_training_on_cuda PASSED\n', '', [1])

    monkeypatch.setattr(C, 'run_tree', slow)
    with pytest.raises(RuntimeError, match=r'(?s)ran past 132 s.*test_training_on_cuda PASSED'):
        C.cuda_tests_step(REPO, str(tmp_path), str(tmp_path), False, seconds=142)
    assert seen['timeout'] == 142 - C.KILL_MARGIN_S and '-v' in seen['args']
