"""tests/numerics.py itself: equivalence checks only compare float64, every check is logged with its machine, and the
margin report fails below 10x, counting other machines' logs only for bounds of the same name."""
import json

import numpy as np
import pytest
import torch

import numerics


@pytest.mark.numerics
def test_equivalence_checks_refuse_anything_but_float64(tmp_path, monkeypatch):
    log = tmp_path / 'n.jsonl'
    monkeypatch.setenv('TOLA_NUMERICS_LOG', str(log))
    a = torch.rand(3, dtype=torch.float64)
    numerics.equivalent(a, a.clone(), 'same tensor')
    numerics.equivalent(a.numpy(), a.numpy() * (1 + 1e-12), 'array within 1e-12')
    with pytest.raises(AssertionError, match='float32'):
        numerics.equivalent(a.float(), a, 'a float32 side')
    with pytest.raises(AssertionError, match='exceeds'):
        numerics.equivalent(a, a * (1 + 1e-6), 'a real difference')
    numerics.within(2e-6, 1e-4, 'a bound')
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r['kind'] for r in rows] == ['equivalence', 'equivalence', 'equivalence', 'bound']
    assert rows[0]['tol'] == numerics.EXACT_TOL and rows[0]['err'] == 0
    assert {r['machine'] for r in rows} == {numerics.machine()}
    assert all(r['test'].endswith('::test_equivalence_checks_refuse_anything_but_float64') for r in rows)


def test_a_check_outside_a_numerics_test_is_refused():
    with pytest.raises(AssertionError, match='numerics'):
        numerics.within(0.0, 1.0, 'unmarked')


def write(path, rows):
    path.write_text(''.join(json.dumps(r) + '\n' for r in rows), encoding='utf-8')
    return str(path)


def test_margin_report_fails_below_ten_and_reads_other_machines(tmp_path, capsys):
    here = write(tmp_path / 'here.jsonl', [
        {'test': 't::a', 'what': 'x', 'err': 1e-6, 'tol': 1e-4, 'kind': 'bound', 'machine': 'CPU A (f, m) AVX2'},
        {'test': 't::a', 'what': 'x', 'err': 2e-6, 'tol': 1e-4, 'kind': 'bound', 'machine': 'CPU A (f, m) AVX512'},
        {'test': 't::b', 'what': 'y', 'err': 1e-15, 'tol': 1e-9, 'kind': 'equivalence', 'machine': 'CPU A (f, m) X'},
    ])
    checks = numerics.read_logs([here])
    assert checks[('t::a', 'x')]['err'] == 2e-6 and numerics.margin(checks[('t::a', 'x')]) == pytest.approx(50)
    assert numerics.main([here]) == 0
    # another machine's old log: its bound of the same name counts (and thins the margin to 5x); its float32 error of
    # a check that is now a float64 equivalence, and checks that no longer exist, do not
    other = write(tmp_path / 'other.jsonl', [
        {'test': 't::a', 'what': 'x', 'err': 2e-5, 'tol': 3e-4},
        {'test': 't::b', 'what': 'y', 'err': 1e-6, 'tol': 1e-5},
        {'test': 't::gone', 'what': 'z', 'err': 1.0, 'tol': 1e-5},
    ])
    checks = numerics.read_logs([here], also=[other])
    assert set(checks) == {('t::a', 'x'), ('t::b', 'y')}
    assert checks[('t::b', 'y')]['err'] == 1e-15 and checks[('t::a', 'x')]['tol'] == 1e-4
    capsys.readouterr()
    assert numerics.main([here, '--also', other]) == 1
    assert 'below 10x: t::a :: x' in capsys.readouterr().err
    assert numerics.main([here, '--also', other, '--markdown']) == 1
    table = capsys.readouterr().out.splitlines()
    assert table[0] == ('| check | kind | largest error, CPU A (f, m) | largest error, other.jsonl | tolerance '
                        '| margin |')
    assert table[2] == '| `t::a` x | bound | 2e-06 | 2e-05 | 1e-04 | 5× |'


def test_argmax_guard_refuses_near_ties():
    numerics.assert_clear_argmax(np.array([[0.0, 1.0, 0.2]]), 0.1, 'clear')
    with pytest.raises(AssertionError, match='near-tie'):
        numerics.assert_clear_argmax(np.array([[0.0, 1.0, 0.9]]), 0.1, 'tie')
