"""The suite's tiers: every marker ``make test`` leaves out has a make target of its own that CI (``.ci/run``) runs, so
no test is left to nobody (docs/testing.md)."""
import configparser
import os
import re

from conftest import REPO


def make_recipe(target):
    """The recipe lines of ``target`` in the Makefile."""
    with open(os.path.join(REPO, 'Makefile'), encoding='utf-8') as f:
        text = f.read()
    match = re.search(rf'^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)', text, re.M)
    assert match, f'Makefile: no target {target}'
    return match.group(1)


def ci_targets():
    with open(os.path.join(REPO, '.ci', 'run'), encoding='utf-8') as f:
        return re.findall(r'^make ([\w-]+)', f.read(), re.M)


def declared_markers():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, 'setup.cfg'))
    return {line.split(':')[0].strip() for line in cfg['tool:pytest']['markers'].strip().splitlines()}


def test_each_marker_make_test_leaves_out_has_a_target_ci_runs():
    expression = re.search(r'-m "([^"]+)"', make_recipe('test')).group(1)
    left_out = re.findall(r'not (\w+)', expression)
    assert set(left_out) == {'gpu_dry_run', 'end_to_end'}, expression
    assert set(left_out) <= declared_markers()
    targets = ci_targets()
    assert 'test' in targets
    for marker in left_out:
        owners = [t for t in targets if t != 'test' and f'-m {marker} ' in make_recipe(t)]
        assert owners, f'no make target that .ci/run calls runs the tests marked {marker}'
