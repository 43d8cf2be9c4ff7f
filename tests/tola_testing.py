"""Shared helpers of the TOLA tests: the tiny random backbone and option-file rewriting."""
import copy
import logging
import os
import signal
import subprocess
import sys

import pytest
import torch
import yaml

from tola_plugin.metrics.tola_iqa_metric import WEIGHTED_METRICS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, 'tests')
TINY_BACKBONE = os.path.join(REPO, 'tests', 'data', 'tola', 'tiny_backbone.yml')


def tiny_backbone():
    """Constructor options of a tiny random TOLANet backbone (same classes and names as full size)."""
    with open(TINY_BACKBONE, encoding='utf-8') as f:
        return yaml.safe_load(f)


def tiny_net_opt(**overrides):
    """TOLANet options: tiny random backbone, default LRC, plus ``overrides``."""
    opt = dict(tiny_backbone(), lrc=dict(type='LatentResidualCorrection'))
    opt.update(overrides)
    return opt


def load_yaml(path):
    with open(path, encoding='utf-8') as f:
        return yaml.safe_load(f)


def tiny_demo_options(rendered, name, total_iter, freq):
    """The demo's train file (options/demo/train_TOLA_demo.yml) on the tiny random backbone (the shipped demo
    backbone is tested in test_demo_backbone.py), on ``rendered`` lines, with the test file's dataset as a
    validation block every ``freq`` iterations."""
    opt = load_yaml(os.path.join(REPO, 'options', 'demo', 'train_TOLA_demo.yml'))
    test = load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))
    opt['name'] = name
    opt['network_g'].update(tiny_backbone())
    opt['datasets']['val'] = dict(test['datasets']['test_1'])
    opt['val'] = dict(test['val'], val_freq=freq)
    for phase, folder in (('train', 'train'), ('val', 'val')):
        opt['datasets'][phase]['dataroot_gt'] = os.path.join(rendered[folder], 'hr')
        opt['datasets'][phase]['labels'] = os.path.join(rendered[folder], 'labels.tsv')
    opt['datasets']['train'].update(num_worker_per_gpu=0, dataset_enlarge_ratio=4)
    opt['train'].update(total_iter=total_iter, warmup_iter=-1)
    opt['train']['scheduler']['periods'] = [total_iter]
    opt['logger'].update(print_freq=1, save_checkpoint_freq=freq)
    return opt


def resume_options(rendered, tmp_path):
    """The exact-resume configuration: the demo file on the tiny backbone, 6 training lines, batch 2 (3 iterations
    per epoch), one data-loader worker, 4 iterations, a state and a validation every 2."""
    with open(os.path.join(rendered['train'], 'labels.tsv'), encoding='utf-8') as f:
        lines = f.readlines()[:6]
    labels = tmp_path / 'labels6.tsv'
    labels.write_text(''.join(lines), encoding='utf-8')
    opt = tiny_demo_options(rendered, 'resume', total_iter=4, freq=2)
    opt['datasets']['train'].update(
        labels=str(labels), num_worker_per_gpu=1, batch_size_per_gpu=2, dataset_enlarge_ratio=1)
    opt['val'].update(val_freq=2, save_img=False)
    return opt


def start_training(folder, opt, kill_at=None):
    """``python -m tola_plugin.train`` on ``opt`` (written to folder/train.yml) in ``folder``, one thread, not waited
    for (stderr piped). ``kill_at``: the run SIGKILLs itself right after saving that iteration's training state
    (tests/train_then_die.py)."""
    with open(folder / 'train.yml', 'w', encoding='utf-8') as f:
        yaml.safe_dump(opt, f, sort_keys=False, allow_unicode=True)
    launcher = ['-m', 'tola_plugin.train'] if kill_at is None else [
        os.path.join(TESTS, 'train_then_die.py'), str(kill_at)
    ]
    return subprocess.Popen(
        [sys.executable, *launcher, '-opt', str(folder / 'train.yml')], cwd=folder,
        env=dict(os.environ, OMP_NUM_THREADS='1'), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill_then_resume(opt, tmp_path, monkeypatch, caplog):
    """Train ``opt`` (4 iterations, a state every 2) in two subprocesses started together; one kills itself
    right after saving its iteration-2 state (a point the test controls, not a race); resume it with
    ``--auto_resume`` through the launcher's code in this process.
    -> (the resumed run's log, the uninterrupted run's net_g_4 'params', the resumed run's)."""
    name = opt['name']
    ref_dir, cut_dir = tmp_path / 'uninterrupted', tmp_path / 'killed'
    ref_dir.mkdir()
    cut_dir.mkdir()
    ref, cut = start_training(ref_dir, opt), start_training(cut_dir, opt, kill_at=2)
    assert cut.wait(timeout=300) == -signal.SIGKILL, cut.stderr.read()[-3000:]
    assert (cut_dir / 'experiments' / name / 'training_states' / '2.state').exists()
    models = cut_dir / 'experiments' / name / 'models'
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
    assert ref.wait(timeout=300) == 0, ref.stderr.read()[-3000:]
    expected = torch.load(ref_dir / 'experiments' / name / 'models' / 'net_g_4.pth', weights_only=True)['params']
    return caplog.text, expected, torch.load(models / 'net_g_4.pth', weights_only=True)['params']


def tiny_options(opt, rendered, tmp_dir):
    """Rewrite a real TOLA option dict for a one-iteration CPU run: tiny random backbone, rendered data,
    batch 2, paths under ``tmp_dir``, random LPIPS trunk (its file loading is tested on its own). Everything
    the variant switches stays as the file says."""
    opt = copy.deepcopy(opt)
    net = opt['network_g']
    for key in ('difftsr_checkpoint', 'transocr_checkpoint'):
        net.pop(key, None)
    net.update(tiny_backbone())
    opt['num_gpu'] = 0
    opt['dist'] = False
    opt['rank'], opt['world_size'] = 0, 1
    opt['is_train'] = 'train' in opt
    opt['auto_resume'] = False
    for phase, ds in opt['datasets'].items():
        ds['phase'] = 'train' if phase == 'train' else 'val'
        ds['scale'] = opt.get('scale', 1)
        ds['io_backend'] = {'type': 'disk'}
        ds.pop('index_list', None)
        if ds['type'] == 'TextDegradationDataset':
            ds['dataroot_gt'] = os.path.join(rendered['train'], 'hr')
            ds['labels'] = os.path.join(rendered['train'], 'labels.tsv')
        else:
            ds['dataroot_lq'] = os.path.join(rendered['val'], 'lr_x4')
            ds['dataroot_gt'] = os.path.join(rendered['val'], 'hr')
            ds['labels'] = os.path.join(rendered['val'], 'labels.tsv')
        if phase == 'train':
            ds.update(batch_size_per_gpu=2, num_worker_per_gpu=0)
    opt['path'] = {k: v for k, v in opt.get('path', {}).items() if k in ('param_key_g', 'strict_load_g')}
    opt['path'].update(
        experiments_root=str(tmp_dir), models=str(tmp_dir), training_states=str(tmp_dir), log=str(tmp_dir),
        visualization=str(tmp_dir), results_root=str(tmp_dir))
    if 'train' in opt and opt['train'].get('perceptual_opt'):
        opt['train']['perceptual_opt']['pretrained_backbone'] = False
    # No ImageNet weights in the test environment: drop the validation metrics that need them (their
    # weight handling is tested in tests/test_eval_image_metrics.py and test_tola_model.py).
    metrics = opt.get('val', {}).get('metrics') or {}
    for name in [n for n, m in metrics.items() if m.get('type') in WEIGHTED_METRICS]:
        del metrics[name]
    return opt


@pytest.fixture(scope='module')
def one_thread():
    """Tiny networks run several times faster with one intra-op thread on the shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
