"""Problem 3 (issue "Nothing lost, nothing run, nothing silent"): kill -9 + ``--auto_resume`` gives the weights
of an uninterrupted run, bit for bit.

The tiny TOLA demo configuration (6 training lines, batch 2, so 3 iterations per epoch; one data-loader
worker; validation every 2 iterations) trains 4 iterations in two subprocesses started together: one runs
uninterrupted, the other is killed with SIGKILL as soon as its iteration-2 state exists (inside epoch 0,
usually during the validation that follows the save). The killed run is then resumed with ``--auto_resume``
through the launcher's code in this process (one thread, like the children; it saves an interpreter start-up).
The resumed run must skip the two batches already seen, continue every RNG stream (ε is drawn from torch's
global RNG; validation must not move it), cross into epoch 1 and end with exactly the uninterrupted run's
LoRA + LRC weights. It also finds the killed run's lock and replaces it as stale.
"""
import pytest
import torch

from tola_testing import kill_then_resume, one_thread, resume_options  # noqa: F401


@pytest.mark.end_to_end
def test_sigkill_between_saves_then_auto_resume_equals_an_uninterrupted_run(rendered_sets, tmp_path, monkeypatch,
                                                                            caplog, capsys, one_thread):  # noqa: F811
    log, expected, got = kill_then_resume(resume_options(rendered_sets, tmp_path), tmp_path, monkeypatch, caplog)
    assert 'stale lock' in capsys.readouterr().err  # the killed run's lock: its PID is gone
    assert 'Resuming training from epoch: 0, iter: 2.' in log
    assert 'epoch:  1, iter:       4' in log  # it crossed into epoch 1 (3 iterations per epoch)
    assert got.keys() == expected.keys()
    differ = [k for k in expected if not torch.equal(got[k], expected[k])]
    assert not differ, f'{len(differ)} of {len(expected)} tensors differ after resuming, first: {differ[:3]}'
