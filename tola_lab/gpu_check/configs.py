"""The option dicts of the GPU check's training runs and models, from the repository's own option files.

``options/train/train_TOLA.yml`` (the model: ``options/test/test_TOLA.yml``) with one of three backbones: the
full-size random backbone (the official checkpoints cannot travel), written once into the work folder and loaded by
every step that needs it (``fullsize_backbone``); the tests' tiny one (``tests/data/tola/tiny_backbone.yml``: the same
classes, few channels) for the smoke step and a dry run; or the demo backbone (trained: the resume step, where LoRA's
effect on a real model's output matters). LPIPS-VGG on a random trunk, validation without the metrics that need
ImageNet weights (a dry run leaves LPIPS out but in the smoke step: its VGG16 would take most of the CPU's
time); the carried rendered
lines (``CARRY/data/train``, ``CARRY/data/val``).
"""
import copy
import os
from typing import Dict, Optional, Sequence

import yaml

from tola_plugin.metrics.tola_iqa_metric import WEIGHTED_METRICS
from tola_plugin.options.reader import read_option_file

TRAINING = 'options/train/train_TOLA.yml'
MODEL = 'options/test/test_TOLA.yml'
TINY_BACKBONE = 'tests/data/tola/tiny_backbone.yml'
BACKBONE_FILES = ('fullsize_backbone/DiffTSR_random.safetensors', 'fullsize_backbone/transocr_random.safetensors')
BACKBONES = ('fullsize', 'tiny', 'demo')


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


def fullsize_backbone(work: str, seed: int = 0) -> Dict:
    """``network_g`` changes that load the full-size backbone with random weights (seed ``seed``) from two files in
    ``work``, written by the first call (a later step, in another process, reads them: the 1.0 B weights are drawn
    once per check)."""
    paths = [os.path.join(work, p) for p in BACKBONE_FILES]
    if not all(os.path.isfile(p) for p in paths):
        from tola_plugin.archs.backbone_builder import build_backbone, save_converted
        from tola_plugin.checkpoints.transocr import save_transocr
        from tola_plugin.utils.atomic_files import atomic_write
        os.makedirs(os.path.dirname(paths[0]), exist_ok=True)
        idm, vae, mom, transocr = build_backbone('random', random_seed=seed)
        atomic_write(paths[1], lambda tmp: save_transocr(transocr, tmp))
        save_converted({'idm': idm, 'vae': vae, 'mom': mom}, paths[0])  # atomic, and last: both files are whole
    return {'backbone_init': 'checkpoint', 'difftsr_checkpoint': paths[0], 'transocr_checkpoint': paths[1]}


def backbone_options(root: str, backbone: str, work: Optional[str] = None) -> Dict:
    """``network_g`` changes for ``backbone`` ('fullsize': ``fullsize_backbone(work)``; 'tiny': random weights at the
    tests' tiny size; 'demo': the shipped demo backbone)."""
    if backbone not in BACKBONES:
        raise ValueError(f'backbone must be one of {BACKBONES}, got {backbone!r}')
    if backbone == 'fullsize':
        return fullsize_backbone(work)
    if backbone == 'demo':
        return {'backbone_init': 'demo'}
    return dict({'backbone_init': 'random', 'random_seed': 0}, **read_yaml(os.path.join(root, TINY_BACKBONE)))


def network_options(opt: Dict, root: str, backbone: str, work: Optional[str]) -> Dict:
    """``opt['network_g']`` with its checkpoints replaced by ``backbone``'s (in place; -> opt)."""
    for key in ('difftsr_checkpoint', 'transocr_checkpoint'):
        opt['network_g'].pop(key, None)
    opt['network_g'].update(backbone_options(root, backbone, work))
    return opt


def model_option_file(root: str, backbone: str, work: str, path: str) -> str:
    """``options/test/test_TOLA.yml`` with ``backbone``, written to ``path``."""
    return write_yaml(path, network_options(read_yaml(os.path.join(root, MODEL)), root, backbone, work))


def training_options(root: str, data: str, backbone: str, on_gpu: bool, name: str, total_iter: int, freq: int,
                     batch: int, precision: str, checkpointing: Sequence[str], accumulate: int, workers: int,
                     work: Optional[str] = None, lr: Optional[float] = None, lpips: Optional[bool] = None) -> Dict:
    """A training option dict: ``total_iter`` iterations of ``batch`` lines of the carry ``data``'s data/train
    (``accumulate`` micro-batches), a training state and a validation on its data/val every ``freq`` (0: none),
    deterministic kernels; ``lr``: a constant learning rate without warm-up (None: the file's schedule); ``lpips``:
    LPIPS-VGG on a random trunk in the loss (None: on a GPU only, its VGG16 would take most of a CPU's time)."""
    full = read_yaml(os.path.join(root, TRAINING))
    opt = network_options(copy.deepcopy(full), root, backbone, work)
    opt.update(name=name, num_gpu='auto' if on_gpu else 0, deterministic=True)
    opt['datasets'] = {
        'train': dict(
            dataset(os.path.join(data, 'data', 'train'), 'gpu_check_train', 0), use_shuffle=True,
            num_worker_per_gpu=workers, batch_size_per_gpu=batch, dataset_enlarge_ratio=1, prefetch_mode=None)
    }
    opt['network_g'].update(precision=precision, gradient_checkpointing=list(checkpointing))
    train = opt['train']
    train.update(total_iter=total_iter, accumulate_grad_batches=accumulate)
    if lr is not None:
        train['optim_g']['lr'] = lr
        train.pop('warmup_iter', None)
    if not (on_gpu if lpips is None else lpips):
        train.pop('perceptual_opt', None)
    else:
        train['perceptual_opt']['pretrained_backbone'] = False  # random VGG trunk: the same cost, no ImageNet file
    opt['path'] = {'pretrain_network_g': None, 'strict_load_g': True, 'resume_state': None}
    opt['logger'] = {'print_freq': 1, 'save_checkpoint_freq': freq or total_iter, 'use_tb_logger': False}
    opt.pop('val', None)
    if freq:
        opt['datasets']['val'] = dataset(os.path.join(data, 'data', 'val'), 'gpu_check_val', 1)
        opt['val'] = dict(copy.deepcopy(full['val']), val_freq=freq, save_img=False)
        metrics = opt['val']['metrics']
        for metric in [k for k, m in metrics.items() if m.get('type') in WEIGHTED_METRICS]:
            del metrics[metric]
    return opt
