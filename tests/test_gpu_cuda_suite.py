"""The ``cuda`` suite itself, on a machine without a usable GPU: ``make test-cuda`` fails naming why instead of
skipping everything, and the checks of tests/test_cuda.py can fail (run here on the CPU with broken outputs; that they
pass on the CPU's real route is the GPU check's dry run, which runs every cuda test's body on the CPU:
tests/test_gpu_check.py)."""
import os
import re
import subprocess

import pytest
import torch

from tola_lab.gpu_check.cuda_tests_step import EXPECTED
from tola_plugin.basicsr_glue import distributed
import conftest
import test_cuda
from tola_testing import REPO


def broken_route(kind):
    """A stand-in for the 200-step route on the CPU whose output is non-finite or differs between two runs."""

    def run(tmp_path, device):
        lq = torch.rand(1, 3, *test_cuda.SIZE)
        out = torch.full_like(lq, 0.5)
        if kind == 'non-finite':
            out[0, 0, 0, 0] = float('nan')
            return lq, out, out.clone()
        return lq, out, out + 1e-3

    return run


@pytest.mark.parametrize('kind', ['non-finite', 'unrepeatable'])
def test_the_200_step_check_fails_on_a_broken_route(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(test_cuda, 'run_200_step_route', broken_route(kind))
    with pytest.raises(AssertionError, match='non-finite' if kind == 'non-finite' else 'not repeatable'):
        test_cuda.test_200_step_route_on_cuda(tmp_path)


@pytest.mark.end_to_end
def test_make_test_cuda_fails_naming_why_where_no_gpu_is_usable():
    """``make test-cuda`` asked to test a GPU: on this machine (no usable CUDA) every cuda test fails with the
    reason, and make exits non-zero (it used to exit 0 with all of them skipped)."""
    if torch.cuda.is_available():
        pytest.skip('this machine has a usable CUDA GPU: make test-cuda runs the tests')
    env = {k: v for k, v in os.environ.items() if not k.startswith(('PYTEST_', 'MAKE'))}
    proc = subprocess.run(['make', '-s', 'test-cuda'], cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert f'no CUDA GPU is usable: {conftest.cuda_unusable()}' in proc.stdout
    last = proc.stdout.splitlines()[-1]
    assert re.match(rf'(.* )?{EXPECTED} errors in ', last) and 'skipped' not in last and 'passed' not in last, last


def test_the_reason_names_a_driver_this_torch_cannot_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(torch.version, 'cuda', '13.0')
    monkeypatch.setattr(distributed, 'nvidia_driver_version', lambda: '535.104.05')
    assert conftest.cuda_unusable().startswith('an NVIDIA driver (535.104.05) is installed but this torch, built for '
                                               'CUDA 13.0, cannot use it')
    monkeypatch.setattr(distributed, 'nvidia_driver_version', lambda: None)
    assert 'sees no CUDA device (no NVIDIA driver is loaded)' in conftest.cuda_unusable()


def test_every_test_marked_cuda_is_where_make_test_cuda_looks():
    """``make test-cuda`` (and the GPU check's step 5) run tests/test_cuda.py only: no other test file is marked."""
    elsewhere = [
        name for name in sorted(os.listdir(os.path.dirname(__file__)))
        if name.startswith('test_') and name.endswith('.py') and name != 'test_cuda.py'
        and re.search(r'mark\.cuda\b',
                      open(os.path.join(os.path.dirname(__file__), name), encoding='utf-8').read())
    ]
    assert elsewhere == []
