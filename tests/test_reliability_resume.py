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
import logging
import os
import signal
import subprocess
import sys
import time

import torch

from conftest import write_options
from tola_testing import one_thread, tiny_demo_options  # noqa: F401


def resume_options(rendered, tmp_path):
    with open(os.path.join(rendered['train'], 'labels.tsv'), encoding='utf-8') as f:
        lines = f.readlines()[:6]
    labels = tmp_path / 'labels6.tsv'
    labels.write_text(''.join(lines), encoding='utf-8')
    opt = tiny_demo_options(rendered, 'resume', total_iter=4, freq=2)
    opt['datasets']['train'].update(
        labels=str(labels), num_worker_per_gpu=1, batch_size_per_gpu=2, dataset_enlarge_ratio=1)
    opt['val'].update(val_freq=2, save_img=False)
    return opt


def start(folder, opt):
    return subprocess.Popen(
        [sys.executable, '-m', 'tola_plugin.train', '-opt',
         write_options(folder / 'train.yml', opt)], cwd=folder, env=dict(os.environ, OMP_NUM_THREADS='1'),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_sigkill_between_saves_then_auto_resume_equals_an_uninterrupted_run(rendered_sets, tmp_path, monkeypatch,
                                                                            caplog, capsys, one_thread):  # noqa: F811
    opt = resume_options(rendered_sets, tmp_path)
    ref_dir, cut_dir = tmp_path / 'uninterrupted', tmp_path / 'killed'
    ref_dir.mkdir()
    cut_dir.mkdir()
    ref, cut = start(ref_dir, opt), start(cut_dir, opt)
    states = cut_dir / 'experiments' / 'resume' / 'training_states'
    deadline = time.time() + 120
    while not (states / '2.state').exists():  # saves are atomic: the name appears complete
        assert cut.poll() is None, cut.stderr.read()[-3000:]
        assert time.time() < deadline, 'the run to kill never saved iteration 2'
        time.sleep(0.02)
    cut.send_signal(signal.SIGKILL)
    cut.wait()
    assert cut.returncode == -signal.SIGKILL
    models = cut_dir / 'experiments' / 'resume' / 'models'
    assert not (models / 'net_g_4.pth').exists()

    from tola_plugin.train import run
    monkeypatch.chdir(cut_dir)
    monkeypatch.setattr(sys, 'argv', ['tola-train', '-opt', str(cut_dir / 'train.yml'), '--auto_resume'])
    logger = logging.getLogger('basicsr')  # BasicSR's logger does not propagate to the root logger
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level('INFO', logger='basicsr'):
            run()
    finally:
        logger.removeHandler(caplog.handler)
    assert 'stale lock' in capsys.readouterr().err  # the killed run's lock: its PID is gone
    assert 'Resuming training from epoch: 0, iter: 2.' in caplog.text
    assert 'epoch:  1, iter:       4' in caplog.text  # it crossed into epoch 1 (3 iterations per epoch)
    assert ref.wait(timeout=300) == 0, ref.stderr.read()[-3000:]

    expected = torch.load(ref_dir / 'experiments' / 'resume' / 'models' / 'net_g_4.pth', weights_only=True)['params']
    got = torch.load(models / 'net_g_4.pth', weights_only=True)['params']
    assert got.keys() == expected.keys()
    differ = [k for k in expected if not torch.equal(got[k], expected[k])]
    assert not differ, f'{len(differ)} of {len(expected)} tensors differ after resuming, first: {differ[:3]}'
