"""The GPU check's run (``gpu_check.sh REPORT_DIR``, tools/gpu_check.py): the environment checked (every
distribution's version beside the one the tests ran with), then the steps in the order of what they are worth,
each in a process of its own within a deadline; the report rewritten after each (report.py). A step whose estimate
does not fit the time left is skipped, saying so; a step that runs past the time left is killed with every process
it started (no worker left holding the GPU). A failing smoke step ends the check: every later step would fail the
same way, slower. The exit status is 1 unless every step that ran passed and none was skipped. Without a usable GPU
the check stops at once, naming why (``--dry-run``: the same steps on the CPU, the tiny network, a few iterations).
SIGTERM or SIGHUP (a lease's command timeout) ends the check: the step running is killed with every process it
started, the report written with that step interrupted; the exit status is then 128 + the signal's number."""
import contextlib
import datetime
import os
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, Optional, Sequence

from tola_lab.gpu_check import environment
from tola_lab.gpu_check.report import JSON_FILE, MARKDOWN_FILE, write_report
from tola_plugin.utils.atomic_files import read_json_dict
from tola_plugin.utils.process_tree import TreeTimeout, run_tree
from tola_plugin.utils.user_text import say

DEFAULT_DEADLINE_S = 540  # a 10-minute command on a lease, less its start and the report's way back
STEPS = ('smoke', 'demo_model', 'rrdb_baseline', 'memory', 'precision', 'inference', 'cuda_tests', 'resume',
         'shared_gpu')  # by value
# demo_model and rrdb_baseline train for the package's docs with all the time they are given (demo_model_step.py,
# rrdb_baseline_step.py): run when asked for by name (--steps smoke,demo_model), never by default.
DEFAULT_STEPS = tuple(s for s in STEPS if s not in ('demo_model', 'rrdb_baseline'))
# Seconds each step is expected to take on one H100 (its measured seconds rounded up: docs/training_gpus.md, "The
# latest report from a GPU"), and in a dry run on a 2-core CPU; the check starts a step only when its estimate fits
# the time left (inference: 169 s measured before its speed table, issue 50's, estimated at 300). With the default
# deadline smoke, memory and precision fit; a second call with --steps inference,cuda_tests runs more.
ESTIMATES_S = {
    'smoke': 25,
    'demo_model': 240,
    'rrdb_baseline': 120,
    'memory': 300,
    'precision': 25,
    'inference': 300,
    'cuda_tests': 240,  # 114 on the H100 (the exact-resume test failing early); past 142 on an H200 (2026-11-30)
    'resume': 150,
    'shared_gpu': 150  # not yet run on a GPU: three torchrun starts of the demo backbone, as the resume step
}  # demo_model, rrdb_baseline: the least worth starting (they use all the time left)
DRY_RUN_ESTIMATES_S = {
    'smoke': 20, 'demo_model': 90, 'rrdb_baseline': 60, 'memory': 20, 'precision': 30, 'inference': 60,
    'cuda_tests': 120, 'resume': 60, 'shared_gpu': 150
}
RESERVE_S = 5  # kept after the last step for the report
STEP_CHILD = 'tola_lab.gpu_check.step_child'  # the module a step's process runs (a test's stand-in replaces it)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # a lease's command timeout, a closed terminal
STAND_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'image_stand_in')
NOT_TESTED = (
    'more than one GPU: DDP across ranks on NCCL (gradient all-reduce, the sampler shared by ranks, rank 0 deciding '
    'the resume state for every rank; tests/test_cuda.py::test_two_rank_nccl_ddp), several GPUs of mixed kinds',
    'more than one node (torchrun across machines, slurm)', 'the official DiffTSR and TransOCR weights (they cannot '
    'travel: the full-size backbone here has random weights; quality on a GPU is judged on the demo backbone)',
    'the paper\'s full training (100K iterations, batch 64 on 4 GPUs): minutes of it at most',
    'a real out-of-memory error on one rank of many (simulated on the CPU: the rank ends the job in one line saying '
    'what to change, tests/test_gpu_distributed.py; the launchers bound memory at start: docs/reliability.md)')


def announce(message: str) -> None:
    """One line of the check's progress, with the time (``say``: stderr)."""
    say(f'[gpu check {datetime.datetime.now():%H:%M:%S}] {message}')


class Interrupted(BaseException):
    """The check's command got one of ``STOP_SIGNALS`` (a BaseException: no ``except Exception`` on the way keeps
    it)."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        self.signal = signal.Signals(signum).name
        super().__init__(self.signal)


@contextlib.contextmanager
def stopped_by_signals():
    """Within: ``STOP_SIGNALS`` raise Interrupted where the check is (a step's process tree is killed on the way out:
    ``run_tree``); a second signal while the check cleans up is ignored. A signal ignored before (``nohup``) stays
    ignored, and the handlers before are restored after. Outside the main thread (where Python cannot handle signals)
    nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got = []

    def handler(signum, frame):
        if not got:
            got.append(signum)
            raise Interrupted(signum)

    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for sig, before in previous.items():
        if before != signal.SIG_IGN:
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, signal.SIG_DFL if before is None else before)  # None: not set from Python


def log_tail(log_file: str) -> str:
    """The end of a step's output."""
    try:
        with open(log_file, encoding='utf-8', errors='replace') as f:
            return f.read()[-3000:]
    except OSError:
        return ''


def step_environment(dry_run: bool) -> Dict[str, str]:
    """The steps' environment: ours; in a dry run, installed modules hidden but the image's (``image_stand_in``: an
    allowlist, ``environment.image_module_names``), so a step that would import one the image lacks fails first."""
    env = dict(os.environ)
    if dry_run:
        env['PYTHONPATH'] = os.pathsep.join(p for p in (STAND_IN, env.get('PYTHONPATH', '')) if p)
        env['TOLA_GPU_CHECK_IMAGE_MODULES'] = ','.join(environment.image_module_names())
    return env


def run_step(name: str, root: str, data: str, work: str, dry_run: bool, timeout: float,
             clock: Callable[[], float] = time.monotonic, report_dir: Optional[str] = None) -> Dict:
    """Step ``name`` in a child process (``step_child``) within ``timeout`` seconds; -> its figures, with its time on
    ``clock``. A child that dies, or runs past the timeout (killed with its descendants), is the step's error, with
    the end of its output. The child is told its time and the report's folder (a step that brings files back writes
    them there)."""
    announce(f'{name} ... (at most {timeout:.0f} s)')
    result_file = os.path.join(work, f'{name}.json')
    log_file = os.path.join(work, f'{name}.log')
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    args = [
        sys.executable, '-u', '-m', STEP_CHILD, name, result_file, '--root', root, '--data', data, '--work', folder,
        '--seconds', f'{timeout:.0f}', '--report-dir',
        os.path.abspath(report_dir or work)
    ] + (['--dry-run'] if dry_run else [])
    start = clock()
    with open(log_file, 'w', encoding='utf-8') as log:
        try:
            proc = run_tree(args, timeout=timeout, cwd=folder, env=step_environment(dry_run), stdout=log, stderr=log)
            how = None if proc.returncode == 0 else f'exit status {proc.returncode}'
        except TreeTimeout as err:
            how = f'ran past the {timeout:.0f} s left before the deadline: killed with {len(err.killed)} processes'
            how += f'; {err.unfinished}' if err.unfinished else ''
    result = read_json_dict(result_file) if how is None else None
    if result is None:
        result = {
            'passed': False, 'error': f'the step\'s process ended without a result ({how or "no JSON"})',
            'output_tail': log_tail(log_file)
        }
    result['step_seconds'] = round(clock() - start, 1)
    announce(f'{name}: {"passed" if result.get("passed") else "FAILED"} ({result["step_seconds"]} s)')
    return result


def run_gpu_check(report_dir: str, root: str, data: Optional[str] = None, dry_run: bool = False,
                  work: Optional[str] = None, command: str = '', deadline: float = DEFAULT_DEADLINE_S,
                  steps: Sequence[str] = DEFAULT_STEPS, clock: Callable[[], float] = time.monotonic) -> int:
    """Run the check of the checkout or bundle ``root`` on the carried data ``data`` (default: ``root``) within
    ``deadline`` seconds on ``clock`` (the tests pass one they move by hand); the report goes to ``report_dir``, the
    runs' files to ``work`` (default: a new temporary folder). -> 0 when every step passed, else 1; 128 + the signal's
    number when SIGTERM or SIGHUP ended it (``stopped_by_signals``)."""
    started, start = datetime.datetime.now().astimezone(), clock()
    data = os.path.abspath(data or root)
    work = os.path.abspath(work or tempfile.mkdtemp(prefix='tola_gpu_check_'))
    os.makedirs(work, exist_ok=True)
    manifest = read_json_dict(os.path.join(data, 'MANIFEST.json')) or {}
    result = {
        'started': started.isoformat(timespec='seconds'), 'command': command, 'dry_run': dry_run, 'work': work,
        'deadline_s': deadline,
        'bundle': {k: v
                   for k, v in manifest.items() if k not in ('wheels', 'image_modules', 'tested_versions')},
        'machine': environment.machine(), 'steps': {}, 'seconds': 0.0, 'not_tested': list(NOT_TESTED)
    }
    order = [s for s in STEPS if s in steps]
    running, running_since = None, 0.0  # the step whose process runs now, and since when on ``clock``

    def save():
        result['seconds'] = clock() - start
        write_report(report_dir, result)

    with stopped_by_signals():
        try:
            reason = result['machine']['cuda_unusable_reason'] or 'torch sees no CUDA device'
            if not dry_run and not result['machine']['cuda_available']:
                result['steps']['smoke'] = {'passed': False, 'error': f'no usable GPU: {reason}'}
                save()
                announce(f'no usable GPU: {reason}; report in {report_dir}')
                return 1
            try:
                result['distributions'] = environment.check_imports(environment.IMAGE_MODULES,
                                                                    os.environ.get('TOLA_GPU_CHECK_SITE', ''), root,
                                                                    manifest.get('tested_versions'))
            except (ImportError, RuntimeError) as err:
                result['steps']['smoke'] = {'passed': False, 'error': str(err)}
                save()
                announce(f'{err}; report in {report_dir}')
                return 1
            # every distribution of the image, in the JSON only: the list a dry run's allowlist would need
            result['image_distributions'] = environment.image_distributions(
                os.environ.get('TOLA_GPU_CHECK_SITE', ''), root)
            skew = {k: v for k, v in result['distributions'].items() if v['differs']}
            announce('versions other than the tests ran with: ' +
                     (', '.join(f'{k} {v["version"]} (tested {v["tested"]})'
                                for k, v in sorted(skew.items())) or 'none'))
            save()
            estimates = DRY_RUN_ESTIMATES_S if dry_run else ESTIMATES_S
            for name in order:
                left = deadline - (clock() - start) - RESERVE_S
                smoke = result['steps'].get('smoke')
                if smoke is not None and not smoke.get('passed'):
                    result['steps'][name] = {
                        'skipped': 'the smoke step failed: this step would fail the same way, slower'
                    }
                elif estimates[name] > left:
                    result['steps'][name] = {
                        'skipped': f'needs about {estimates[name]} s, {max(left, 0):.0f} s left before the deadline '
                        f'of {deadline:.0f} s (--deadline)'
                    }
                else:
                    running, running_since = name, clock()
                    result['steps'][name] = run_step(name, root, data, work, dry_run, timeout=left, clock=clock,
                                                     report_dir=report_dir)
                    running = None
                if 'skipped' in result['steps'][name]:
                    announce(f'{name}: skipped: {result["steps"][name]["skipped"]}')
                save()
        except Interrupted as err:
            how = f'interrupted by {err.signal} (the check\'s command was stopped: a lease\'s command timeout?)'
            if running is not None:
                result['steps'][running] = {
                    'passed': False, 'interrupted': err.signal,
                    'error': f'{how}: the step was killed with every process it started',
                    'output_tail': log_tail(os.path.join(work, f'{running}.log')),
                    'step_seconds': round(clock() - running_since, 1)
                }
            for name in order:
                result['steps'].setdefault(name, {'skipped': f'the check was {how}'})
            result['interrupted'] = err.signal
            save()
            announce(f'{how}; report: {os.path.join(report_dir, MARKDOWN_FILE)} and {JSON_FILE}')
            return 128 + err.signum
    ran = result['steps'].values()
    passed = all(s.get('passed') for s in ran)
    announce(f'{"every step passed" if passed else "some step FAILED or was skipped"}; report: '
             f'{os.path.join(report_dir, MARKDOWN_FILE)} and {JSON_FILE}')
    return 0 if passed else 1
