"""Tolerances of the numerical tests: one way to measure an error, assert its bound and re-measure the margins.

Every float comparison of the suite goes through ``within`` inside a test marked ``numerics``. Each tolerance is at
least 10x the largest error measured on the three x86-64 kernel sets CI runs (AVX-512 where the CPU has it, AVX2
forced, torch's generic 'default' kernels), against a float64 reference or the official code's fixture; the
comment beside it says which (docs/testing.md, "Numerical tolerances").

Re-measure on any machine (JSON lines, one per check), then print each check's largest error and its margin:

    TOLA_NUMERICS_LOG=/tmp/n.jsonl .venv/bin/python -m pytest -q -m numerics tests
    .venv/bin/python tests/numerics.py /tmp/n.jsonl
"""
import json
import os
import sys

import numpy as np

_ACTIVE = {'marked': False}  # set per test by conftest.py from the test's ``numerics`` marker


def _float64(x) -> np.ndarray:
    if hasattr(x, 'detach'):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def rel_err(ours, ref) -> float:
    """max |ours - ref| / max |ref|, in float64 (tensors, arrays or numbers)."""
    ours, ref = _float64(ours), _float64(ref)
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-300))


def abs_err(ours, ref) -> float:
    """max |ours - ref|, in float64."""
    return float(np.abs(_float64(ours) - _float64(ref)).max())


def argmax_margin(scores) -> float:
    """Smallest gap between the largest and the second-largest score along the last axis (float64)."""
    ordered = np.sort(_float64(scores), axis=-1)
    return float((ordered[..., -1] - ordered[..., -2]).min())


def assert_clear_argmax(scores, tolerated_error: float, what: str) -> None:
    """Exact ids are safe only where each argmax's top two scores are more than twice the tolerated score error
    apart: then every CPU whose scores pass their tolerance check picks the same ids (choose inputs so)."""
    gap = argmax_margin(scores)
    assert gap > 2 * tolerated_error, (f'{what}: top-two gap {gap:.3g} is within twice the tolerated error '
                                       f'{tolerated_error:.3g}: a near-tie; choose inputs with a margin')


def within(err: float, tol: float, what: str) -> None:
    """Assert ``err <= tol``; with TOLA_NUMERICS_LOG set, also append the measured error to that file."""
    if not _ACTIVE['marked']:
        raise AssertionError(f'{what}: a tolerance check in a test without the "numerics" marker (CI re-runs only '
                             'marked tests under other CPU kernels)')
    err = float(err)
    log = os.environ.get('TOLA_NUMERICS_LOG')
    if log:
        test = os.environ.get('PYTEST_CURRENT_TEST', '?').rsplit(' ', 1)[0]
        with open(log, 'a', encoding='utf-8') as f:
            f.write(json.dumps({'test': test, 'what': what, 'err': err, 'tol': tol}) + '\n')
    assert err <= tol, f'{what}: error {err:.3g} exceeds the tolerance {tol:.3g}'


def margins(paths):
    """{(test, what): (largest error, tolerance)} over the JSON-lines logs ``paths``."""
    worst = {}
    for path in paths:
        with open(path, encoding='utf-8') as f:
            for line in f:
                row = json.loads(line)
                key = (row['test'], row['what'])
                err = max(row['err'], worst.get(key, (0.0, 0.0))[0])
                worst[key] = (err, row['tol'])
    return worst


def main(paths) -> int:
    """Print every check, smallest margin first; exit status 1 if any margin is below 10."""
    worst = margins(paths)
    rows = sorted(worst.items(), key=lambda kv: kv[1][1] / max(kv[1][0], 1e-300))
    print(f'{"margin":>10}  {"largest error":>13}  {"tolerance":>9}  check')
    for (test, what), (err, tol) in rows:
        margin = tol / err if err > 0 else float('inf')
        print(f'{margin:10.3g}  {err:13.3g}  {tol:9.3g}  {test} :: {what}')
    return int(any(tol < 10 * err for err, tol in worst.values()))


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
