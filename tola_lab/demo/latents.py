"""What the IDM stage reads for every pool sample, computed once with the trained VAE and TransOCR.

``z_hr.npy`` (N,3,h,w) float32 and ``z_lr.npy`` (K*N,3,h,w): unscaled posterior modes of the HR lines and of
every LR version; with a TransOCR, ``prior_tokens.npy`` (K*N,24) int64 and ``prior_confidences.npy`` (K*N,24)
float32: the text prior of every LR version (``transocr_to_idm`` of the greedy decoding, exactly what TOLANet
feeds the MoM). ``done`` is written last and holds ``inputs`` (e.g. the digests of the VAE and TransOCR files):
a cache made from other inputs is rebuilt.
"""
import json
import os
import shutil
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from tola_lab.demo.pool import LinePool
from tola_plugin.text.text_prior import transocr_to_idm

TEXT_STEPS = 24  # TOLANet's greedy steps


@dataclass
class LatentCache:
    z_hr: np.ndarray
    z_lr: np.ndarray
    prior_tokens: Optional[np.ndarray] = None  # None when built without a TransOCR
    prior_confidences: Optional[np.ndarray] = None


def _as_batch(array: np.ndarray, start: int, stop: int, device='cpu') -> torch.Tensor:
    return torch.from_numpy(np.array(array[start:stop])).to(device).permute(0, 3, 1, 2).float().div_(255.0)


@torch.no_grad()
def build_latent_cache(folder: str, vae, ocr, pool: LinePool, inputs=None, batch_size: int = 16,
                       log=print) -> LatentCache:
    """Encode the pool into ``folder``, or reuse it when its ``done`` file records the same ``inputs``.
    ``ocr`` None: no text priors (the IDM then trains on ground-truth and empty text only)."""
    done = os.path.join(folder, 'done')
    if os.path.isfile(done):
        with open(done, encoding='utf-8') as f:
            if json.load(f) == {'inputs': inputs}:
                log(f'latents: reusing {folder}')
                return open_latent_cache(folder)
        log(f'latents: {folder} was made from other inputs; encoding again')
    if os.path.isdir(folder):
        shutil.rmtree(folder)  # ours: stale or unfinished
    os.makedirs(folder)
    vae.eval()
    device = next(vae.parameters()).device  # encoded where the VAE is (a GPU's batches are larger)
    if device.type != 'cpu':
        batch_size *= 8
    n, n_lr = pool.num_lines, pool.lr.shape[0]
    probe = vae.encode(_as_batch(pool.hr, 0, 1, device)).latent_dist.mode()
    shape = tuple(probe.shape[1:])
    out = {
        'z_hr': np.lib.format.open_memmap(os.path.join(folder, 'z_hr.npy'), 'w+', np.float32, (n, ) + shape),
        'z_lr': np.lib.format.open_memmap(os.path.join(folder, 'z_lr.npy'), 'w+', np.float32, (n_lr, ) + shape),
    }
    if ocr is not None:
        ocr.eval()
        out.update(prior_tokens=np.zeros((n_lr, 24), np.int64), prior_confidences=np.zeros((n_lr, 24), np.float32))
    for start in range(0, n, batch_size):
        out['z_hr'][start:start + batch_size] = vae.encode(_as_batch(pool.hr, start, start + batch_size,
                                                                     device)).latent_dist.mode().cpu().numpy()
    log(f'latents: {n} HR lines encoded')
    for start in range(0, n_lr, batch_size):
        x = _as_batch(pool.lr, start, start + batch_size, device)
        out['z_lr'][start:start + batch_size] = vae.encode(x).latent_dist.mode().cpu().numpy()
        if ocr is not None:
            ids, probs = ocr.greedy_decode(x, max_steps=TEXT_STEPS, incremental=True)
            tokens, confidences = transocr_to_idm(ids, probs)
            out['prior_tokens'][start:start + batch_size] = tokens.cpu().numpy()
            out['prior_confidences'][start:start + batch_size] = confidences.cpu().numpy()
        if (start // batch_size) % 50 == 0:
            log(f'latents: LR {start + x.shape[0]}/{n_lr}')
    out['z_hr'].flush()
    out['z_lr'].flush()
    if ocr is not None:
        np.save(os.path.join(folder, 'prior_tokens.npy'), out['prior_tokens'])
        np.save(os.path.join(folder, 'prior_confidences.npy'), out['prior_confidences'])
    with open(done, 'w', encoding='utf-8') as f:
        json.dump({'inputs': inputs}, f)
    return open_latent_cache(folder)


def open_latent_cache(folder: str) -> LatentCache:

    def load(name, mmap=True):
        path = os.path.join(folder, name)
        return np.load(path, mmap_mode='r' if mmap else None) if os.path.isfile(path) else None

    return LatentCache(
        load('z_hr.npy'), load('z_lr.npy'), load('prior_tokens.npy', False), load('prior_confidences.npy', False))
