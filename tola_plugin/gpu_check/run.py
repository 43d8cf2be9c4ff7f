"""The GPU check's run (``gpu_check.sh REPORT_DIR``, tools/gpu_check.py): the environment checked, then each step
in turn, the report rewritten after each (report.py). A step that fails is reported with its error and the next
one runs; the exit status is 1 unless every step passed. Without a usable GPU the check stops at once, naming why
(``--dry-run``: the same steps on the CPU, with the demo backbone, a few iterations)."""
import datetime
import os
import sys
import tempfile
import time
import traceback
from typing import Callable, Dict, Optional

from tola_plugin.gpu_check import environment
from tola_plugin.gpu_check.cuda_tests_step import cuda_tests_step
from tola_plugin.gpu_check.inference_step import inference_step
from tola_plugin.gpu_check.memory_step import memory_step
from tola_plugin.gpu_check.report import JSON_FILE, MARKDOWN_FILE, write_report
from tola_plugin.gpu_check.resume_step import resume_step
from tola_plugin.utils.atomic_files import read_json_dict


def say(message: str) -> None:
    print(f'[gpu check {datetime.datetime.now():%H:%M:%S}] {message}', file=sys.stderr, flush=True)


def run_step(name: str, step: Callable[[], Dict]) -> Dict:
    """``step()``'s figures with its wall time; an exception becomes the step's error (with its traceback)."""
    say(f'{name} ...')
    start = time.monotonic()
    try:
        result = step()
    except Exception as err:  # a failing step is reported, and the next one runs
        result = {'passed': False, 'error': f'{type(err).__name__}: {err}', 'traceback': traceback.format_exc()}
    result['step_seconds'] = round(time.monotonic() - start, 1)
    say(f'{name}: {"passed" if result.get("passed") else "FAILED"} ({result["step_seconds"]} s)')
    return result


def run_gpu_check(report_dir: str, root: str, dry_run: bool = False, work: Optional[str] = None,
                  command: str = '') -> int:
    """Run the check of the bundle folder ``root``; the report goes to ``report_dir``, the runs' files to ``work``
    (default: a new temporary folder). -> 0 when every step passed, else 1."""
    started, start = datetime.datetime.now().astimezone(), time.monotonic()
    work = work or tempfile.mkdtemp(prefix='tola_gpu_check_')
    result = {
        'started': started.isoformat(timespec='seconds'), 'command': command, 'dry_run': dry_run, 'work': work,
        'bundle': read_json_dict(os.path.join(root, 'MANIFEST.json')) or {}, 'machine': environment.machine(),
        'steps': {}, 'seconds': 0.0
    }
    result['bundle'].pop('wheels', None)
    result['bundle'].pop('image_modules', None)

    def save():
        result['seconds'] = time.monotonic() - start
        write_report(report_dir, result)

    reason = result['machine']['cuda_unusable_reason'] or 'torch sees no CUDA device'
    if not dry_run and not result['machine']['cuda_available']:
        result['steps']['cuda_tests'] = {'passed': False, 'error': f'no usable GPU: {reason}'}
        save()
        say(f'no usable GPU: {reason}; report in {report_dir}')
        return 1
    try:
        result['distributions'] = environment.check_imports(environment.IMAGE_MODULES,
                                                            os.environ.get('TOLA_GPU_CHECK_SITE', ''))
    except (ImportError, RuntimeError) as err:
        result['steps']['cuda_tests'] = {'passed': False, 'error': str(err)}
        save()
        say(f'{err}; report in {report_dir}')
        return 1
    steps = {
        'cuda_tests': lambda: cuda_tests_step(root, dry_run),
        'resume': lambda: resume_step(root, os.path.join(work, 'resume'), dry_run),
        'memory': lambda: memory_step(root, dry_run),
        'inference': lambda: inference_step(root, os.path.join(work, 'inference'), dry_run),
    }
    os.makedirs(os.path.join(work, 'inference'), exist_ok=True)
    for name, step in steps.items():
        result['steps'][name] = run_step(name, step)
        save()
    passed = all(s.get('passed') for s in result['steps'].values())
    say(f'{"every step passed" if passed else "some step FAILED"}; report: '
        f'{os.path.join(report_dir, MARKDOWN_FILE)} and {JSON_FILE}')
    return 0 if passed else 1
