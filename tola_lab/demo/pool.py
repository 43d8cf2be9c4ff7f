"""A fixed pool of rendered HR text lines and their degraded LR versions, generated once, read as memmaps.

Rendering (``TextLineRenderer``) and degradation (``TextDegradationDataset``) cost more per line on a CPU core than
a training step of the small demo modules needs (docs/demo_backbone.md, "How it was trained"), so the backbone stages
draw from a pool
made once: ``num_lines`` HR lines and ``degradations`` LR versions of each (degradation ``k`` of line ``i`` is
``TextDegradationDataset`` epoch ``k``, index ``i``: the package's own chains, deterministic per (seed, k, i)).

Layout of ``<dir>``: ``hr/*.png`` + ``hr/labels.tsv`` (tools/render_text.py's format), ``hr.npy`` (N,128,512,3)
uint8 RGB, ``lr.npy`` (K*N,128,512,3) uint8 RGB (row k*N + i), ``idm_tokens.npy`` (N,24) int64,
``ocr_target.npy`` (N,25) int64, ``meta.json`` (the options; written last, so a pool without it is
incomplete and is rebuilt).
"""
import json
import os
import shutil
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
from torch.utils.data import DataLoader, Dataset

from tola_plugin.data.image_io import tensor_to_uint8, write_image
from tola_plugin.data.text_degradation_dataset import TextDegradationDataset
from tola_plugin.data.text_render import DEFAULT_CATEGORY_PROBS, TextLineRenderer

POOL_FORMAT = 'tola_plugin.backbone_pool/1'


class _RenderedLines(Dataset):
    """Line ``i`` of a ``TextLineRenderer``, written as ``<folder>/<i+1:06d>.png``; yields (name, text)."""

    def __init__(self, folder: str, seed: int, renderer_opts: Dict):
        self.folder, self.seed, self.renderer_opts = folder, seed, renderer_opts
        self.renderer: Optional[TextLineRenderer] = None  # built lazily in each worker (font tables)

    def __len__(self):
        return int(self.renderer_opts['num_lines'])

    def __getitem__(self, i):
        if self.renderer is None:
            opts = {k: v for k, v in self.renderer_opts.items() if k != 'num_lines'}
            self.renderer = TextLineRenderer(
                opts.get('fonts'), seed=self.seed, category_probs=opts.get('category_probs', DEFAULT_CATEGORY_PROBS),
                chinese_chars=opts.get('chinese_chars'))
        rgb, text, _ = self.renderer.render(i)
        name = f'{i + 1:06d}.png'
        write_image(os.path.join(self.folder, name), rgb, order='RGB')
        return name, text


@dataclass
class LinePool:
    """Memory-mapped pool arrays (see the module docstring); ``labels[i]`` is line i's transcription."""
    hr: np.ndarray
    lr: np.ndarray
    idm_tokens: np.ndarray
    ocr_target: np.ndarray
    labels: List[str]

    @property
    def num_lines(self) -> int:
        return self.hr.shape[0]

    @property
    def degradations(self) -> int:
        return self.lr.shape[0] // self.hr.shape[0]


def build_pool(folder: str, num_lines: int, seed: int, degradations: int, chinese_chars: Optional[str] = None,
               category_probs=DEFAULT_CATEGORY_PROBS, fonts=None, degradation: Optional[Dict] = None, workers: int = 0,
               log=print) -> LinePool:
    """Generate the pool in ``folder`` (or reuse it when its meta.json records the same options).

    Args:
        num_lines, seed: HR lines ``TextLineRenderer(seed=seed).render(0..num_lines-1)``.
        degradations: LR versions per line (``TextDegradationDataset`` epochs 0..K-1).
        chinese_chars, category_probs, fonts: renderer options (``TextLineRenderer``).
        degradation: ``TextDegradationDataset`` options (seed, scales, chain_probs, ...), merged over
            ``{seed: seed}``.
        workers: DataLoader workers for rendering and degrading (results do not depend on it).
    A folder holding a different or unfinished pool is an error: delete it or choose another folder.
    """
    meta = {
        'format': POOL_FORMAT, 'num_lines': int(num_lines), 'seed': int(seed), 'degradations': int(degradations),
        'chinese_chars': chinese_chars, 'category_probs': [float(p) for p in category_probs],
        'fonts': list(fonts) if fonts else None, 'degradation': dict(degradation or {})
    }
    meta_path = os.path.join(folder, 'meta.json')
    if os.path.isfile(meta_path):
        with open(meta_path, encoding='utf-8') as f:
            found = json.load(f)
        if found != meta:
            raise ValueError(f'{folder} holds a pool made with other options ({meta_path}); delete the folder or '
                             f'set another work_dir.\n found: {found}\n wanted: {meta}')
        log(f'pool: reusing {folder} ({num_lines} lines x {degradations} degradations)')
        return open_pool(folder)
    if os.path.exists(folder):
        shutil.rmtree(folder)  # an unfinished pool of ours (no meta.json): generated again from scratch
    hr_dir = os.path.join(folder, 'hr')
    os.makedirs(hr_dir)
    renderer_opts = {
        'num_lines': num_lines, 'chinese_chars': chinese_chars, 'category_probs': category_probs, 'fonts': fonts
    }
    names_texts = []
    for batch in DataLoader(
            _RenderedLines(hr_dir, seed, renderer_opts), batch_size=32, num_workers=workers, collate_fn=list):
        names_texts.extend(batch)
    with open(os.path.join(hr_dir, 'labels.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(f'{name}\t{text}\n' for name, text in names_texts)
    log(f'pool: rendered {num_lines} lines into {hr_dir}')

    opts = {
        'dataroot_gt': hr_dir, 'labels': os.path.join(hr_dir, 'labels.tsv'), 'io_backend': {'type': 'disk'},
        'seed': seed, **(degradation or {})
    }
    dataset = TextDegradationDataset(opts)
    shape = (num_lines, 128, 512, 3)
    hr = np.lib.format.open_memmap(os.path.join(folder, 'hr.npy'), 'w+', np.uint8, shape)
    lr = np.lib.format.open_memmap(
        os.path.join(folder, 'lr.npy'), 'w+', np.uint8, (degradations * num_lines, ) + shape[1:])
    idm_tokens = np.zeros((num_lines, 24), np.int64)
    ocr_target = np.zeros((num_lines, 25), np.int64)
    for k in range(degradations):
        dataset.set_epoch(k)
        loader = DataLoader(dataset, batch_size=32, num_workers=workers, shuffle=False)
        start = 0
        for item in loader:
            n = item['lq'].shape[0]
            lr[k * num_lines + start:k * num_lines + start + n] = tensor_to_uint8(item['lq'])
            if k == 0:
                hr[start:start + n] = tensor_to_uint8(item['gt'])
                idm_tokens[start:start + n] = item['idm_tokens'].numpy()
                ocr_target[start:start + n] = item['ocr_target'].numpy()
            start += n
        log(f'pool: degradation {k + 1}/{degradations} done')
    hr.flush()
    lr.flush()
    np.save(os.path.join(folder, 'idm_tokens.npy'), idm_tokens)
    np.save(os.path.join(folder, 'ocr_target.npy'), ocr_target)
    with open(meta_path, 'w', encoding='utf-8') as f:
        json.dump(meta, f, indent=1)
    return open_pool(folder)


def open_pool(folder: str) -> LinePool:
    """The pool arrays of a finished ``build_pool`` folder (memory-mapped, read-only)."""
    if not os.path.isfile(os.path.join(folder, 'meta.json')):
        raise FileNotFoundError(f'{folder}: no finished line pool (meta.json missing); build it with build_pool')
    with open(os.path.join(folder, 'hr', 'labels.tsv'), encoding='utf-8') as f:
        labels = [line.rstrip('\n').split('\t', 1)[1] for line in f if line.strip()]
    load = lambda name, mm: np.load(os.path.join(folder, name), mmap_mode='r' if mm else None)  # noqa: E731
    return LinePool(
        load('hr.npy', True), load('lr.npy', True), load('idm_tokens.npy', False), load('ocr_target.npy', False),
        labels)
