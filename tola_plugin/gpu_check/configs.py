"""The option dicts of the GPU check's training runs and model, from the repository's own option files.

``options/train/train_TOLA.yml`` (the model: ``options/test/test_TOLA.yml``) with random backbone weights (the
official checkpoints cannot travel): at full size on a GPU; in a dry run (CPU) at the test suite's tiny size
(``tests/data/tola/tiny_backbone.yml``: the same classes, few channels). LPIPS-VGG on a random trunk, validation
without the metrics that need ImageNet weights (a dry run leaves LPIPS out: its VGG16 would take most of the CPU's
time); the bundle's rendered lines (``data/train``, ``data/val``).
"""
import copy
import os
from typing import Dict, Sequence

import yaml

from tola_plugin.metrics.tola_iqa_metric import WEIGHTED_METRICS
from tola_plugin.utils.option_files import read_option_file

TRAINING = 'options/train/train_TOLA.yml'
MODEL = 'options/test/test_TOLA.yml'
TINY_BACKBONE = 'tests/data/tola/tiny_backbone.yml'


def read_yaml(path: str) -> Dict:
    return read_option_file(path)  # the package's one reader of option files


def write_yaml(path: str, opt: Dict) -> str:
    with open(path, 'w', encoding='utf-8') as f:
        yaml.safe_dump(opt, f, sort_keys=False, allow_unicode=True)
    return path


def dataset(folder: str, name: str, seed: int) -> Dict:
    """A TextDegradationDataset block on a folder of HR lines with its labels.tsv."""
    return {
        'name': name, 'type': 'TextDegradationDataset', 'dataroot_gt': folder,
        'labels': os.path.join(folder, 'labels.tsv'), 'io_backend': {'type': 'disk'}, 'seed': seed
    }


def random_backbone(root: str, dry_run: bool) -> Dict:
    """``network_g`` changes: the backbone with random weights (seed 0), full size or (dry run) tiny."""
    net = {'backbone_init': 'random', 'random_seed': 0}
    return dict(net, **read_yaml(os.path.join(root, TINY_BACKBONE))) if dry_run else net


def model_option_file(root: str, dry_run: bool, path: str) -> str:
    """``options/test/test_TOLA.yml`` with ``random_backbone``, written to ``path``."""
    opt = read_yaml(os.path.join(root, MODEL))
    for key in ('difftsr_checkpoint', 'transocr_checkpoint'):
        opt['network_g'].pop(key, None)
    opt['network_g'].update(random_backbone(root, dry_run))
    return write_yaml(path, opt)


def training_options(root: str, dry_run: bool, name: str, total_iter: int, freq: int, batch: int, precision: str,
                     checkpointing: Sequence[str], accumulate: int, workers: int) -> Dict:
    """A training option dict for the bundle in ``root``: ``total_iter`` iterations of ``batch`` lines (``accumulate``
    micro-batches), a training state and a validation every ``freq`` (0: no validation), deterministic kernels."""
    full = read_yaml(os.path.join(root, TRAINING))
    opt = copy.deepcopy(full)
    data = os.path.join(root, 'data')
    opt.update(name=name, num_gpu=0 if dry_run else 'auto', deterministic=True)
    opt['datasets'] = {
        'train': dict(
            dataset(os.path.join(data, 'train'), 'gpu_check_train', 0), use_shuffle=True, num_worker_per_gpu=workers,
            batch_size_per_gpu=batch, dataset_enlarge_ratio=1, prefetch_mode=None)
    }
    net = opt['network_g']
    for key in ('difftsr_checkpoint', 'transocr_checkpoint'):
        net.pop(key, None)
    net.update(random_backbone(root, dry_run))
    net.update(precision=precision, gradient_checkpointing=list(checkpointing))
    train = opt['train']
    train.update(total_iter=total_iter, accumulate_grad_batches=accumulate)
    if dry_run:
        train.pop('perceptual_opt', None)  # LPIPS-VGG's VGG16 would be most of a CPU's time
    else:
        train['perceptual_opt']['pretrained_backbone'] = False  # random VGG trunk: the same cost, no ImageNet file
    opt['path'] = {'pretrain_network_g': None, 'strict_load_g': True, 'resume_state': None}
    opt['logger'] = {'print_freq': 1, 'save_checkpoint_freq': freq or total_iter, 'use_tb_logger': False}
    opt.pop('val', None)
    if freq:
        opt['datasets']['val'] = dataset(os.path.join(data, 'val'), 'gpu_check_val', 1)
        opt['val'] = dict(copy.deepcopy(full['val']), val_freq=freq, save_img=False)
        metrics = opt['val']['metrics']
        for metric in [k for k, m in metrics.items() if m.get('type') in WEIGHTED_METRICS]:
            del metrics[metric]
    return opt
