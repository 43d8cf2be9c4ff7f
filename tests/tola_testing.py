"""Shared helpers of the TOLA tests: the tiny random backbone and option-file rewriting."""
import copy
import os

import pytest
import torch
import yaml

from tola_plugin.metrics.tola_iqa_metric import WEIGHTED_METRICS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
