"""The GPU check's run (``gpu_check.sh REPORT_DIR``, tools/gpu_check.py): the environment checked (every
distribution's version beside the one the tests ran with), then the steps in the order of what they are worth,
each in a process of its own within a deadline; the report rewritten after each (report.py). A step whose estimate
does not fit the time left is skipped, saying so; a step that runs past the time left is killed with every process
it started (no worker left holding the GPU). A failing smoke step ends the check: every later step would fail the
same way, slower. The exit status is 1 unless every step that ran passed and none was skipped. Without a usable GPU
the check stops at once, naming why (``--dry-run``: the same steps on the CPU, the tiny network, a few iterations)."""
import datetime
import os
import sys
import tempfile
import time
from typing import Dict, Optional, Sequence

from tola_plugin.lab.gpu_check import environment
from tola_plugin.lab.gpu_check.report import JSON_FILE, MARKDOWN_FILE, write_report
from tola_plugin.utils.atomic_files import read_json_dict
from tola_plugin.utils.process_tree import TreeTimeout, run_tree
from tola_plugin.utils.user_text import say

DEFAULT_DEADLINE_S = 540  # a 10-minute command on a lease, less its start and the report's way back
STEPS = ('smoke', 'memory', 'precision', 'inference', 'cuda_tests', 'resume')  # by value: the first ones first
# Seconds each step is expected to take on one H100 (its measured seconds rounded up: docs/training_gpus.md, "The
# latest report from a GPU"), and in a dry run on a 2-core CPU; the check starts a step only when its estimate fits
# the time left. With the default deadline the first four fit; a second call with
# --steps cuda_tests,resume runs the rest.
ESTIMATES_S = {'smoke': 25, 'memory': 300, 'precision': 25, 'inference': 180, 'cuda_tests': 120, 'resume': 150}
DRY_RUN_ESTIMATES_S = {'smoke': 20, 'memory': 20, 'precision': 30, 'inference': 40, 'cuda_tests': 120, 'resume': 60}
RESERVE_S = 5  # kept after the last step for the report
# What this environment has and a stock CUDA PyTorch image lacks (and the check does not carry): a dry run hides them
# from its steps (image_stand_in/sitecustomize.py), so a step that would import one on the GPU fails on the CPU first.
ABSENT_ON_IMAGE = ('pyiqa', 'openvino', 'gradio', 'rapidocr_onnxruntime', 'selenium')
STAND_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'image_stand_in')
NOT_TESTED = (
    'more than one GPU: DDP across ranks on NCCL (gradient all-reduce, the sampler shared by ranks, rank 0 deciding '
    'the resume state for every rank; tests/test_cuda.py::test_two_rank_nccl_ddp), several GPUs of mixed kinds',
    'more than one node (torchrun across machines, slurm)', 'the official DiffTSR and TransOCR weights (they cannot '
    'travel: the full-size backbone here has random weights; quality on a GPU is judged on the demo backbone)',
    'the paper\'s full training (100K iterations, batch 64 on 4 GPUs): minutes of it at most')


def announce(message: str) -> None:
    """One line of the check's progress, with the time (``say``: stderr)."""
    say(f'[gpu check {datetime.datetime.now():%H:%M:%S}] {message}')


def step_environment(dry_run: bool) -> Dict[str, str]:
    """The steps' environment: ours; in a dry run, the image's missing modules hidden (``ABSENT_ON_IMAGE``)."""
    env = dict(os.environ)
    if dry_run:
        env['PYTHONPATH'] = os.pathsep.join(p for p in (STAND_IN, env.get('PYTHONPATH', '')) if p)
        env['TOLA_GPU_CHECK_ABSENT'] = ','.join(ABSENT_ON_IMAGE)
    return env


def run_step(name: str, root: str, data: str, work: str, dry_run: bool, timeout: float) -> Dict:
    """Step ``name`` in a child process (``step_child``) within ``timeout`` seconds; -> its figures, with its wall
    time. A child that dies, or runs past the timeout (killed with its descendants), is the step's error, with the
    end of its output."""
    announce(f'{name} ... (at most {timeout:.0f} s)')
    result_file = os.path.join(work, f'{name}.json')
    log_file = os.path.join(work, f'{name}.log')
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    args = [
        sys.executable, '-u', '-m', 'tola_plugin.lab.gpu_check.step_child', name, result_file, '--root', root, '--data',
        data, '--work', folder
    ] + (['--dry-run'] if dry_run else [])
    start = time.monotonic()
    with open(log_file, 'w', encoding='utf-8') as log:
        try:
            proc = run_tree(args, timeout=timeout, cwd=folder, env=step_environment(dry_run), stdout=log, stderr=log)
            how = None if proc.returncode == 0 else f'exit status {proc.returncode}'
        except TreeTimeout as err:
            how = f'ran past the {timeout:.0f} s left before the deadline: killed with {len(err.killed)} processes'
    result = read_json_dict(result_file) if how is None else None
    if result is None:
        with open(log_file, encoding='utf-8', errors='replace') as f:
            tail = f.read()[-3000:]
        result = {
            'passed': False, 'error': f'the step\'s process ended without a result ({how or "no JSON"})',
            'output_tail': tail
        }
    result['step_seconds'] = round(time.monotonic() - start, 1)
    announce(f'{name}: {"passed" if result.get("passed") else "FAILED"} ({result["step_seconds"]} s)')
    return result


def run_gpu_check(report_dir: str, root: str, data: Optional[str] = None, dry_run: bool = False,
                  work: Optional[str] = None, command: str = '', deadline: float = DEFAULT_DEADLINE_S,
                  steps: Sequence[str] = STEPS) -> int:
    """Run the check of the checkout or bundle ``root`` on the carried data ``data`` (default: ``root``) within
    ``deadline`` seconds; the report goes to ``report_dir``, the runs' files to ``work`` (default: a new temporary
    folder). -> 0 when every step passed, else 1."""
    started, start = datetime.datetime.now().astimezone(), time.monotonic()
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

    def save():
        result['seconds'] = time.monotonic() - start
        write_report(report_dir, result)

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
    skew = {k: v for k, v in result['distributions'].items() if v['differs']}
    announce('versions other than the tests ran with: ' + (', '.join(f'{k} {v["version"]} (tested {v["tested"]})'
                                                                     for k, v in sorted(skew.items())) or 'none'))
    save()
    estimates = DRY_RUN_ESTIMATES_S if dry_run else ESTIMATES_S
    for name in [s for s in STEPS if s in steps]:
        left = deadline - (time.monotonic() - start) - RESERVE_S
        smoke = result['steps'].get('smoke')
        if smoke is not None and not smoke.get('passed'):
            result['steps'][name] = {'skipped': 'the smoke step failed: this step would fail the same way, slower'}
        elif estimates[name] > left:
            result['steps'][name] = {
                'skipped': f'needs about {estimates[name]} s, {max(left, 0):.0f} s left before the deadline of '
                f'{deadline:.0f} s (--deadline)'
            }
        else:
            result['steps'][name] = run_step(name, root, data, work, dry_run, timeout=left)
        if 'skipped' in result['steps'][name]:
            announce(f'{name}: skipped: {result["steps"][name]["skipped"]}')
        save()
    ran = result['steps'].values()
    passed = all(s.get('passed') for s in ran)
    announce(f'{"every step passed" if passed else "some step FAILED or was skipped"}; report: '
             f'{os.path.join(report_dir, MARKDOWN_FILE)} and {JSON_FILE}')
    return 0 if passed else 1
