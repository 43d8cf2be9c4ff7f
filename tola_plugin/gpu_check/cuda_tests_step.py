"""Step 1 of the GPU check: the tests marked ``cuda`` (``pytest -m cuda --require-cuda``, as ``make test-cuda``)
from the bundle's tests/ on the bundled package; a dry run only collects them (the CPU has no GPU to run them on)."""
import re
import subprocess
import sys
import time
from typing import Dict

RUN_TIMEOUT_S = 1800
TESTS = 'tests/test_cuda.py'  # every test marked cuda (make test-cuda selects them from tests/)
EXPECTED = 10  # the tests of tests/test_cuda.py (the 2-GPU one skips itself on one GPU)


def summary_counts(line: str) -> Dict[str, int]:
    """pytest's last line -> counts: '8 passed, 1 skipped, 1 failed in 9.1s' -> {'passed': 8, 'skipped': 1, 'failed':
    1}; '10 errors' -> {'error': 10}; with --collect-only '10/578 tests collected (568 deselected) in 4.4s' ->
    {'collected': 10, 'deselected': 568}."""
    counts = {('error' if word == 'errors' else word): int(n)
              for n, word in re.findall(r'(\d+) (passed|failed|skipped|errors?|deselected)', line)}
    collected = re.search(r'(\d+)(?:/\d+)? tests? collected', line)
    if collected:
        counts['collected'] = int(collected.group(1))
    return counts


def cuda_tests_step(root: str, dry_run: bool) -> Dict:
    """Run (dry run: collect) ``pytest -m cuda`` in the bundle folder ``root``."""
    args = [sys.executable, '-m', 'pytest', '-q', '-m', 'cuda', '-rs', '--require-cuda', '-p', 'no:cacheprovider']
    args += ['--collect-only'] if dry_run else []
    start = time.monotonic()
    proc = subprocess.run(args + [TESTS], cwd=root, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    counts = summary_counts(lines[-1] if lines else '')
    result = {
        'command': 'python ' + ' '.join(args[1:] + [TESTS]), 'seconds': round(time.monotonic() - start, 1),
        'exit_status': proc.returncode, 'summary': lines[-1] if lines else proc.stderr[-500:], 'counts': counts,
        'failures': [line for line in lines if line.startswith(('FAILED', 'ERROR', 'SKIPPED'))]
    }
    collected = counts.get('collected', 0) if dry_run else sum(
        counts.get(k, 0) for k in ('passed', 'failed', 'skipped', 'error'))
    result['passed'] = proc.returncode == 0 and collected == EXPECTED
    if not dry_run:
        result['passed'] = result['passed'] and counts.get('failed', 0) == 0 and counts.get('error', 0) == 0
    return result
