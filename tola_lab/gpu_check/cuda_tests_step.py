"""The GPU check's cuda-tests step: the tests marked ``cuda`` (``pytest -m cuda --require-cuda``, as ``make
test-cuda``) on the package the check runs. Their fixture's rendered lines come from the carry where the machine has
no CJK font (``TOLA_TEST_RENDERED_SETS``); a dry run runs their bodies on the CPU standing in for the GPU
(``TOLA_CUDA_TESTS_ON_CPU=1``). Passed when every test ran and passed, except those that need more GPUs than the
machine has (``MULTI_GPU_TESTS``: they skip, and the report lists them as not tested)."""
import os
import re
import sys
import time
import xml.etree.ElementTree as ElementTree
from typing import Dict, List

from tola_plugin.utils.process_tree import TreeTimeout, run_tree

TESTS = 'tests/test_cuda.py'  # every test marked cuda (make test-cuda selects them from tests/)
EXPECTED = 11  # the tests of tests/test_cuda.py
MULTI_GPU_TESTS = ('test_two_rank_nccl_ddp', )  # skip themselves on one GPU
# skipped on the CPU standing in for the GPU in a dry run (emulated there, many times slower)
DRY_RUN_SKIPS = ('test_pipeline_and_tola_infer_in_each_precision[bf16]',
                 'test_pipeline_and_tola_infer_in_each_precision[fp16]')
RUN_TIMEOUT_S = 480
KILL_MARGIN_S = 10  # pytest is stopped this long before the step would be, so its output so far is reported
FIXTURE_ENV = 'TOLA_TEST_RENDERED_SETS'  # tests/conftest.py's


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


def outcomes(junit_xml: str) -> Dict[str, str]:
    """{test name (with its parameters): 'passed' | 'failed' | 'error' | 'skipped: REASON'} from pytest's JUnit XML."""
    found = {}
    for case in ElementTree.parse(junit_xml).getroot().iter('testcase'):
        outcome = 'passed'
        for child in case:
            if child.tag in ('failure', 'error'):
                outcome = 'failed' if child.tag == 'failure' else 'error'
            elif child.tag == 'skipped':
                outcome = 'skipped: ' + (child.get('message') or '')
        found[case.get('name')] = outcome
    return found


def judge(results: Dict[str, str], dry_run: bool) -> List[str]:
    """What keeps the run from passing: missing tests, failures, errors, skips of a one-GPU test."""
    problems = [f'{len(results)} tests ran, {EXPECTED} expected'] if len(results) != EXPECTED else []
    for name, outcome in sorted(results.items()):
        allowed = name.split('[')[0] in MULTI_GPU_TESTS or (dry_run and name in DRY_RUN_SKIPS)
        if outcome.startswith('skipped') and allowed:
            continue
        if outcome != 'passed':
            problems.append(f'{name}: {outcome}')
    return problems


def cuda_tests_step(root: str, data: str, work: str, dry_run: bool, seconds: float = RUN_TIMEOUT_S) -> Dict:
    """Run ``pytest -m cuda`` in the folder ``root`` (a checkout or the bundle) within the step's ``seconds``; past
    them, an error with the tests done so far (``-v``: one line each)."""
    junit = os.path.join(work, 'cuda_tests.xml')
    args = [
        sys.executable, '-m', 'pytest', '-v', '-m', 'cuda', '-rs', '--require-cuda', '-p', 'no:cacheprovider',
        f'--junitxml={junit}', TESTS
    ]
    # no third-party pytest plugins: the tests need none, and one installed beside (xdist, whose execnet the dry run's
    # stand-in image hides) would fail the start where the image lacks what it imports
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD='1')
    env[FIXTURE_ENV] = os.path.join(data, 'fixtures', 'rendered_sets')
    if dry_run:
        env.update(TOLA_CUDA_TESTS_ON_CPU='1', OMP_NUM_THREADS='1')
    start = time.monotonic()
    timeout = max(1.0, min(RUN_TIMEOUT_S, seconds - KILL_MARGIN_S))
    try:
        proc = run_tree(args, timeout=timeout, cwd=root, env=env)
    except TreeTimeout as err:
        raise RuntimeError(f'pytest ran past {timeout:.0f} s and was killed; its output:\n'
                           f'{(err.output or "")[-3000:]}') from None
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    results = outcomes(junit) if os.path.isfile(junit) else {}
    problems = judge(results, dry_run)
    return {
        'command': 'python ' + ' '.join(args[1:]), 'seconds': round(time.monotonic() - start,
                                                                    1), 'exit_status': proc.returncode,
        'summary': lines[-1] if lines else proc.stderr[-500:], 'counts': summary_counts(lines[-1] if lines else ''),
        'outcomes': results, 'problems': problems, 'device': 'cpu (dry run: CUDA_TESTS_ON_CPU)' if dry_run else 'cuda',
        'passed': proc.returncode == 0 and not problems, 'output_tail': '' if not problems else proc.stdout[-3000:]
    }
