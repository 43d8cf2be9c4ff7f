"""The ``cuda`` suite itself, on a machine without a usable GPU: ``make test-cuda`` fails naming why instead of
skipping everything, and the checks of tests/test_cuda.py can fail (run here on the CPU with broken outputs)."""
import pytest
import torch

import test_cuda


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


def test_the_200_step_check_passes_on_the_cpu_route(tmp_path, monkeypatch):
    """The same check over the real route, on the CPU: deterministic, finite, in [0, 1]."""
    real = test_cuda.run_200_step_route
    monkeypatch.setattr(test_cuda, 'run_200_step_route', lambda tmp_path, device: real(tmp_path, 'cpu'))
    test_cuda.test_200_step_route_on_cuda(tmp_path)
