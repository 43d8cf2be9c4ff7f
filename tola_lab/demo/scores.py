"""Held-out scores of the demo backbone, recorded in its manifest: VAE reconstruction PSNR, TransOCR accuracy
on LR and HR lines, and the frozen one-step route (TOLANet without LoRA/LRC) against the LR input.

PSNR is BasicSR's ``calculate_psnr`` on the Y channel of 8-bit images without border crop (what TOLA's
validation reports); accuracies compare lower-cased, normalized strings (the TransOCR alphabet has no
upper case, DiffTSR's recognizer targets are lower-cased).
"""
from typing import Dict, Sequence

import numpy as np
import torch

from tola_lab.demo.pool import LinePool
from tola_lab.demo.training_stages import images
from tola_plugin.data.image_io import tensor_to_uint8
from tola_plugin.metrics.image_metrics import mean_psnr_y8
from tola_plugin.metrics.text_metrics import normalize
from tola_plugin.ocr.transocr_recognizer import read_text


@torch.no_grad()
def vae_psnr(vae, pool: LinePool, batch_size: int = 8) -> float:
    """Mean PSNR of decode(mode(encode(HR))) against HR over the pool's lines."""
    out, ref = [], []
    device = next(vae.parameters()).device
    for start in range(0, pool.num_lines, batch_size):
        x = images(pool.hr, range(start, min(start + batch_size, pool.num_lines)), device=device)
        out.extend(tensor_to_uint8(vae.decode(vae.encode(x).latent_dist.mode()).sample))
        ref.extend(tensor_to_uint8(x))
    return mean_psnr_y8(out, ref)


@torch.no_grad()
def transocr_accuracy(ocr, array: np.ndarray, labels: Sequence[str], batch_size: int = 32) -> float:
    """Exact-match accuracy (lower-cased, normalized) of greedy TransOCR (``read_text``) on the uint8 lines of
    ``array``."""
    hits = 0
    device = next(ocr.parameters()).device
    for start in range(0, len(labels), batch_size):
        x = images(array, range(start, min(start + batch_size, len(labels))), device=device)
        for read, label in zip(read_text(ocr, x), labels[start:start + batch_size]):
            hits += normalize(read.text, lower=True) == normalize(label, lower=True)
    return hits / len(labels)


@torch.no_grad()
def one_step_scores(net, pool: LinePool, batch_size: int = 8) -> Dict[str, float]:
    """Frozen one-step route (``net``: a TOLANet, eval mode) on the first LR version of every pool line:
    mean PSNR of the LR input and of the restored line against HR, and TransOCR accuracy of both."""
    lr_imgs, out_imgs, hr_imgs = [], [], []
    device = next(net.parameters()).device  # where the network is (the GPU check's demo_model step: CUDA)
    for start in range(0, pool.num_lines, batch_size):
        rows = range(start, min(start + batch_size, pool.num_lines))
        lq, gt = images(pool.lr, rows, device=device), images(pool.hr, rows)
        restored = net(lq, noise_seeds=list(rows))
        lr_imgs.extend(tensor_to_uint8(lq))
        out_imgs.extend(tensor_to_uint8(restored))
        hr_imgs.extend(tensor_to_uint8(gt))
    return {
        'psnr_lr': mean_psnr_y8(lr_imgs, hr_imgs), 'psnr_one_step': mean_psnr_y8(out_imgs, hr_imgs),
        'transocr_acc_lr': transocr_accuracy(net.transocr, np.stack(lr_imgs), pool.labels),
        'transocr_acc_one_step': transocr_accuracy(net.transocr, np.stack(out_imgs), pool.labels)
    }
