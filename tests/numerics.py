"""Tolerances of the numerical tests: one way to compare floats, assert the bound and re-measure the margins.

Two kinds of check, both only inside tests marked ``numerics`` (docs/testing.md, "Numerical tolerances"):

- ``equivalent(ours, ref, what)``: two sides that are equal in exact arithmetic (merged vs unmerged LoRA, cached vs
  full-prefix decoding, a file round trip, ...), both computed in float64. Any kernel's summation order then moves
  the result by ~1e-15 relative, so the one tolerance ``EXACT_TOL`` = 1e-9 holds with a margin of 1e5 or more on
  every CPU and GPU, even behind t = 999's x101.6; a real difference (a lost tensor, a wrong layer) is >1e-4.
- ``within(err, tol, what)``: a bound, mostly a float32 result against a float64 reference or the official code's
  fixture. The comment beside each tolerance derives it: at least 100x the largest error measured (three kernel sets
  on two CPU vendors), with t = 999's x101.6 included for values downstream of the one-step update.

Re-measure on any machine (JSON lines, one per check, with the CPU and kernels), then print each check's largest
error and its margin; the exit status is 1 when a margin is below ``MIN_MARGIN`` (CI runs this on its own log):

    TOLA_NUMERICS_LOG=/tmp/n.jsonl .venv/bin/python -m pytest -q -m numerics tests
    .venv/bin/python tests/numerics.py /tmp/n.jsonl            # --markdown: the table of docs/testing.md
"""
import argparse
import functools
import json
import os
import platform
import sys

import numpy as np

_ACTIVE = {'marked': False}  # set per test by conftest.py from the test's ``numerics`` marker
EXACT_TOL = 1e-9  # relative, for float64 equivalence checks
MIN_MARGIN = 10.0  # CI fails below this margin (tolerance / largest error) on its own machine
KERNEL_ENV = ('ATEN_CPU_CAPABILITY', 'MKL_ENABLE_INSTRUCTIONS', 'ONEDNN_MAX_CPU_ISA')


def _float64(x) -> np.ndarray:
    if hasattr(x, 'detach'):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _dtype_name(x) -> str:
    return str(getattr(x, 'dtype', type(x).__name__)).replace('torch.', '')


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


@functools.lru_cache(maxsize=1)
def machine() -> str:
    """The CPU model and the kernels in use, e.g. 'AMD EPYC (family 25, model 17) avx512'."""
    name, family, model = platform.processor() or platform.machine(), '?', '?'
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            for line in f:
                key, _, value = (s.strip() for s in line.partition(':'))
                if key == 'model name':
                    name = value
                elif key == 'cpu family':
                    family = value
                elif key == 'model':
                    model = value
                elif not line.strip():
                    break
    except OSError:
        pass
    import torch
    kernels = torch.backends.cpu.get_cpu_capability()
    forced = ' '.join(f'{k}={os.environ[k]}' for k in KERNEL_ENV if k in os.environ)
    return f'{name} (family {family}, model {model}) {kernels}{" " + forced if forced else ""}'


def _check(err: float, tol: float, what: str, kind: str) -> None:
    if not _ACTIVE['marked']:
        raise AssertionError(f'{what}: a tolerance check in a test without the "numerics" marker (CI re-runs only '
                             'marked tests under other CPU kernels)')
    err = float(err)
    log = os.environ.get('TOLA_NUMERICS_LOG')
    if log:
        test = os.environ.get('PYTEST_CURRENT_TEST', '?').rsplit(' ', 1)[0]
        row = {'test': test, 'what': what, 'err': err, 'tol': tol, 'kind': kind, 'machine': machine()}
        with open(log, 'a', encoding='utf-8') as f:  # one short line per write: appends of two workers interleave whole
            f.write(json.dumps(row) + '\n')
    assert err <= tol, f'{what}: error {err:.3g} exceeds the tolerance {tol:.3g}'


def within(err: float, tol: float, what: str) -> None:
    """A bound: assert ``err <= tol`` (the tolerance derived in the comment beside it); logged."""
    _check(err, tol, what, 'bound')


def equivalent(ours, ref, what: str) -> None:
    """Two sides equal in exact arithmetic, both float64 tensors or arrays: rel_err <= EXACT_TOL; logged."""
    for side, value in (('ours', ours), ('the reference', ref)):
        if _dtype_name(value) != 'float64':
            raise AssertionError(f'{what}: {side} is {_dtype_name(value)}; an equivalence check compares two '
                                 'float64 computations (.double() the modules and inputs)')
    _check(rel_err(ours, ref), EXACT_TOL, what, 'equivalence')


def _rows(path):
    with open(path, encoding='utf-8') as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                row.setdefault('kind', 'bound')
                row.setdefault('machine', os.path.basename(path))  # logs written before the machine was recorded
                yield row


def read_logs(paths, also=()):
    """{(test, what): {'kind', 'tol', 'err': largest, 'by_machine': {machine: largest}}} over JSON-lines logs.

    ``also``: logs of other machines (e.g. measured on another vendor's CPU at an earlier commit) whose errors count
    only for the bounds of ``paths`` with the same test and check name; their tolerances and other rows are ignored.
    """
    checks = {}
    for path in paths:
        for row in _rows(path):
            entry = checks.setdefault((row['test'], row['what']), {'err': 0.0, 'by_machine': {}})
            entry.update(kind=row['kind'], tol=row['tol'])
            entry['err'] = max(entry['err'], row['err'])
            entry['by_machine'][row['machine']] = max(entry['by_machine'].get(row['machine'], 0.0), row['err'])
    for path in also:
        for row in _rows(path):
            entry = checks.get((row['test'], row['what']))
            if entry is not None and entry['kind'] == 'bound' == row['kind']:
                entry['err'] = max(entry['err'], row['err'])
                entry['by_machine'][row['machine']] = max(entry['by_machine'].get(row['machine'], 0.0), row['err'])
    return checks


def margin(entry) -> float:
    return entry['tol'] / entry['err'] if entry['err'] > 0 else float('inf')


def _short(test: str) -> str:
    return test.replace('tests/', '', 1)


def report(checks, markdown: bool = False) -> str:
    """Every check, smallest margin first (plain text), or the docs table (markdown: one error column per CPU)."""
    rows = sorted(checks.items(), key=lambda kv: (kv[1]['kind'] != 'bound', margin(kv[1])))
    if not markdown:
        lines = [f'{"margin":>10}  {"largest error":>13}  {"tolerance":>9}  {"kind":11}  check']
        for (test, what), e in rows:
            lines.append(f'{margin(e):10.3g}  {e["err"]:13.3g}  {e["tol"]:9.3g}  {e["kind"]:11}  {test} :: {what}')
        return '\n'.join(lines)
    cpu = lambda m: m.split(')')[0] + ')' if '(' in m else m  # noqa: E731  (the CPU model, not its kernels)
    cpus = sorted({cpu(m) for e in checks.values() for m in e['by_machine']})
    head = ['check', 'kind'] + [f'largest error, {c}' for c in cpus] + ['tolerance', 'margin']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * 2 + '---:|' * (len(cpus) + 2)]
    for (test, what), e in rows:
        per_cpu = []
        for name in cpus:
            errs = [v for m, v in e['by_machine'].items() if cpu(m) == name]
            per_cpu.append(f'{max(errs):.2g}' if errs else '')
        cells = [f'`{_short(test)}` {what}', e['kind']] + per_cpu + [f'{e["tol"]:.0e}', f'{margin(e):.3g}×']
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='Margins of the numerical checks over TOLA_NUMERICS_LOG files.')
    parser.add_argument('logs', nargs='+', help='logs of the current tests (kinds and tolerances come from these)')
    parser.add_argument('--also', nargs='*', default=[], metavar='LOG',
                        help="other machines' logs: their errors count for the bounds of the same name")
    parser.add_argument('--markdown', action='store_true', help="docs/testing.md's table, one column per CPU")
    parser.add_argument('--min-margin', type=float, default=MIN_MARGIN)
    args = parser.parse_args(argv)
    checks = read_logs(args.logs, args.also)
    if not checks:
        print(f'no checks in {args.logs}: run the tests with TOLA_NUMERICS_LOG set', file=sys.stderr)
        return 1
    print(report(checks, args.markdown))
    thin = [f'{t} :: {w}' for (t, w), e in checks.items() if margin(e) < args.min_margin]
    machines = sorted({m for e in checks.values() for m in e['by_machine']})
    print(f'\n{len(checks)} checks ({sum(e["kind"] == "equivalence" for e in checks.values())} float64 equivalences) '
          f'measured on: ' + '; '.join(machines))
    if thin:
        print(f'{len(thin)} check(s) with a margin below {args.min_margin:g}x: ' + '; '.join(thin), file=sys.stderr)
    return int(bool(thin))


if __name__ == '__main__':
    sys.exit(main())
