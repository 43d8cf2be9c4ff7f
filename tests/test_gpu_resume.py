"""Exact resume on GPU machines, tested on a CPU with CUDA simulated: the training state keeps the CUDA RNG stream
of the device the rank computes on (not every visible device's), so it resumes on another GPU layout; under
torchrun only rank 0 removes the temporary files of interrupted saves, and rank 0 decides which state every rank
resumes from (basicsr_glue/training_resume.py)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from tola_plugin.basicsr_glue import training_resume as R
from conftest import free_port
from tola_testing import TESTS


class CudaRng:
    """torch.cuda's RNG functions on a machine with ``count`` GPUs, the process on ``current``."""

    def __init__(self, monkeypatch, count, current):
        self.streams = {i: torch.tensor([i, 100 + i], dtype=torch.uint8) for i in range(count)}
        self.set = {}
        monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
        monkeypatch.setattr(torch.cuda, 'is_initialized', lambda: True)
        monkeypatch.setattr(torch.cuda, 'current_device', lambda: current)
        monkeypatch.setattr(torch.cuda, 'get_rng_state', lambda device: self.streams[device].clone())
        monkeypatch.setattr(torch.cuda, 'get_rng_state_all', lambda: [self.streams[i] for i in range(count)])
        monkeypatch.setattr(torch.cuda, 'set_rng_state', lambda state, device: self.set.__setitem__(device, state))


def test_state_holds_the_current_devices_stream_and_resumes_on_another_layout(monkeypatch):
    saved = R.capture_rng()
    assert saved['cuda'] is None or not torch.cuda.is_available()  # this machine: CUDA never used
    CudaRng(monkeypatch, count=8, current=3)  # saved by rank 3 of an 8-GPU node
    state = R.capture_rng()
    assert torch.equal(state['cuda'], torch.tensor([3, 103], dtype=torch.uint8))
    resumed = CudaRng(monkeypatch, count=2, current=1)  # resumed on a 2-GPU machine, on its device 1
    R.restore_rng(state)
    assert list(resumed.set) == [1] and torch.equal(resumed.set[1], state['cuda'])
    R.restore_rng(saved)  # leave this process's CPU streams as they were


def test_states_of_the_earlier_format_restore_the_current_devices_stream(monkeypatch):
    old = dict(R.capture_rng(), cuda=[torch.tensor([0, 1], dtype=torch.uint8), torch.tensor([2, 3], dtype=torch.uint8)])
    resumed = CudaRng(monkeypatch, count=2, current=1)
    R.restore_rng(old)
    assert torch.equal(resumed.set[1], torch.tensor([2, 3], dtype=torch.uint8)) and list(resumed.set) == [1]
    CudaRng(monkeypatch, count=4, current=3)
    with pytest.raises(ValueError, match='CUDA RNG streams of 2 device\\(s\\); this process computes on device 3'):
        R.restore_rng(old)
    R.restore_rng(dict(old, cuda=[]))  # saved by a CPU run: no CUDA stream to restore


def test_only_rank_zero_removes_temporary_files(tmp_path):
    states = tmp_path / 'training_states'
    states.mkdir()
    (states / '.4.state.abc.tmp').write_bytes(b'partial')
    opt = {'path': {'training_states': str(states), 'models': str(tmp_path)}, 'rank': 1}
    warnings = []
    assert R.find_resume_state(opt, warnings.append) == (None, None)
    assert (states / '.4.state.abc.tmp').exists() and warnings == []  # another rank's: left to rank 0
    opt['rank'] = 0
    assert R.find_resume_state(opt, warnings.append) == (None, None)
    assert not (states / '.4.state.abc.tmp').exists() and len(warnings) == 1 and 'interrupted save' in warnings[0]
    # a rank that listed the file after another process removed it: no FileNotFoundError
    R.remove_interrupted_saves(str(states), ['.4.state.abc.tmp'], warnings.append)
    assert len(warnings) == 1


def resume_on_two_ranks(tmp_path, iters_of_rank):
    """Two gloo ranks, each with its own experiment folder holding states of ``iters_of_rank[r]`` (a per-node
    filesystem), through BasicSR's ``load_resume_state``: -> what each rank printed."""
    port = free_port()
    procs = [
        subprocess.Popen([
            sys.executable,
            os.path.join(TESTS, 'resume_on_rank.py'),
            str(rank), '2',
            str(port),
            str(tmp_path / f'node{rank}'), ','.join(map(str, iters))
        ], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS='1'))
        for rank, iters in enumerate(iters_of_rank)
    ]
    outputs = [p.communicate(timeout=1200) for p in procs]  # a guard against a hang: each rank imports torch
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


@pytest.mark.end_to_end
def test_every_rank_resumes_the_state_rank_zero_chose(tmp_path):
    """Rank 1 sees a newer state (6) than rank 0 (4): both resume from 4, rank 0's choice."""
    assert resume_on_two_ranks(tmp_path, [[2, 4], [2, 4, 6]]) == [{'iter': 4}, {'iter': 4}]


@pytest.mark.end_to_end
def test_a_rank_without_the_chosen_state_is_an_error_on_every_rank(tmp_path):
    """Rank 1's filesystem lags (its newest is 2): every rank stops with the same error naming rank 1 and 4.state."""
    results = resume_on_two_ranks(tmp_path, [[2, 4], [2]])
    assert results[0] == results[1] and 'error' in results[0], results
    assert results[0]['error'].startswith('rank 0 resumes from 4.state, but not every rank can read it (rank 1: ')
    assert os.path.join('node1', 'training_states', '4.state') in results[0]['error']
