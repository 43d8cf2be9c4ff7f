"""Real-ESRGAN's second-order degradation for one image on CPU, from basicsr's building blocks.

basicsr runs this chain batched on GPU inside ``RealESRGANModel.feed_data`` with one random draw per
batch; here it is per sample (kernels: ``basicsr.data.degradations``; noise: ``random_add_*_noise_pt``;
JPEG: ``DiffJPEG`` or cv2; resize: ``F.interpolate``). Blur uses ``cv2.filter2D`` with reflect-101
borders: the same correlation as basicsr's batched ``filter2D`` (max difference ~1e-6, tested) but
about 5x faster for one image on one CPU thread. Defaults are DiffTSR's softened settings
(YuzheZhang-1999/DiffTSR: train/dataset/utils/real_esrgan_bsrgan_degradation.py, marked "lxm");
Real-ESRGAN's originals are given in the comments. As in DiffTSR the ground truth is not USM-sharpened.
"""
import copy
import math

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from basicsr.data.degradations import (circular_lowpass_kernel, random_add_gaussian_noise_pt,
                                       random_add_poisson_noise_pt, random_mixed_kernels)
from basicsr.utils.diffjpeg import DiffJPEG

from tola_plugin.data.image_io import jpeg_round_trip, tensor_to_uint8
from tola_plugin.data.sample_rng import seeded_global_rngs

_KERNELS = ['iso', 'aniso', 'generalized_iso', 'generalized_aniso', 'plateau_iso', 'plateau_aniso']

REALESRGAN_DEFAULTS = {
    # first-order blur kernel
    'kernel_range': [7, 21],  # odd sizes in this range
    'kernel_pad_to': 21,
    'kernel_list': list(_KERNELS),
    'kernel_prob': [0.45, 0.25, 0.12, 0.03, 0.12, 0.03],
    'sinc_prob': 0.1,
    'blur_sigma': [0.2, 3.0],
    'betag_range': [0.5, 4.0],
    'betap_range': [1.0, 2.0],
    # second-order blur kernel
    'kernel_list2': list(_KERNELS),
    'kernel_prob2': [0.45, 0.25, 0.12, 0.03, 0.12, 0.03],
    'sinc_prob2': 0.1,
    'blur_sigma2': [0.2, 1.5],
    'betag_range2': [0.5, 4.0],
    'betap_range2': [1.0, 2.0],
    'final_sinc_prob': 0.4,  # Real-ESRGAN 0.8
    # first degradation
    'resize_prob': [0.2, 0.7, 0.1],  # up, down, keep
    'resize_range': [0.15, 1.5],
    'gaussian_noise_prob': 0.3,  # Real-ESRGAN 0.5
    'noise_range': [1.0, 20.0],  # Real-ESRGAN [1, 30]
    'poisson_scale_range': [0.05, 3.0],
    'gray_noise_prob': 0.3,  # Real-ESRGAN 0.4
    'jpeg_range': [50.0, 95.0],  # Real-ESRGAN [30, 95]
    # second degradation
    'second_blur_prob': 0.3,  # Real-ESRGAN 0.8
    'resize_prob2': [0.3, 0.4, 0.3],
    'resize_range2': [0.3, 1.2],
    'gaussian_noise_prob2': 0.3,  # Real-ESRGAN 0.5
    'noise_range2': [1.0, 15.0],  # Real-ESRGAN [1, 25]
    'poisson_scale_range2': [0.05, 2.5],
    'gray_noise_prob2': 0.4,
    'jpeg_range2': [50.0, 95.0],  # Real-ESRGAN [30, 95]
    # implementation choices
    'resize_modes': ['area', 'bilinear', 'bicubic'],
    'jpeg_backend': 'diffjpeg',  # 'diffjpeg' (as DiffTSR/basicsr) or 'cv2' (libjpeg)
}


def merge_options(defaults: dict, opt: dict, what: str) -> dict:
    """``defaults`` updated by ``opt``; an unknown key is an error listing the known ones."""
    unknown = sorted(set(opt or {}) - set(defaults))
    if unknown:
        raise KeyError(f'unknown {what} option(s) {unknown}; known: {sorted(defaults)}')
    merged = copy.deepcopy(defaults)
    merged.update(copy.deepcopy(opt or {}))
    return merged


def blur(out: torch.Tensor, kernel: np.ndarray) -> torch.Tensor:
    """(1,3,H,W) float32 or float64, correlated with an odd (k,k) kernel, reflect-101 borders (basicsr ``filter2D``)."""
    img = np.ascontiguousarray(out[0].permute(1, 2, 0).numpy())
    img = cv2.filter2D(img, -1, kernel.astype(np.float32), borderType=cv2.BORDER_REFLECT_101)
    return torch.from_numpy(img).permute(2, 0, 1)[None]


def _check_probs(name: str, probs, n: int):
    if len(probs) != n or any(p < 0 for p in probs) or not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
        raise ValueError(f'{name} must be {n} non-negative probabilities summing to 1, got {probs}')


class RealESRGANDegradation:
    """``__call__(img, scale, rng)``: RGB float32 (H,W,3) in [0,1] -> RGB float32 (H//scale, W//scale, 3)
    in [0,1] on 8-bit levels. All randomness comes from the numpy Generator ``rng``.
    """

    def __init__(self, **opt):
        self.opt = o = merge_options(REALESRGAN_DEFAULTS, opt, 'realesrgan')
        lo, hi = o['kernel_range']
        if lo % 2 == 0 or hi % 2 == 0 or not 3 <= lo <= hi <= o['kernel_pad_to'] or o['kernel_pad_to'] % 2 == 0:
            raise ValueError(f'kernel_range must be odd sizes <= odd kernel_pad_to, got {o["kernel_range"]}, '
                             f'{o["kernel_pad_to"]}')
        self.kernel_sizes = list(range(lo, hi + 1, 2))
        for key in ('kernel_prob', 'kernel_prob2'):
            _check_probs(key, o[key], len(o['kernel_list' + key[len('kernel_prob'):]]))
        for key in ('resize_prob', 'resize_prob2'):
            _check_probs(key, o[key], 3)
        if o['jpeg_backend'] not in ('diffjpeg', 'cv2'):
            raise ValueError(f'jpeg_backend must be "diffjpeg" or "cv2", got {o["jpeg_backend"]!r}')
        self.jpeger = DiffJPEG(differentiable=False) if o['jpeg_backend'] == 'diffjpeg' else None

    def _kernel(self, rng, suffix: str) -> np.ndarray:
        """Blur kernel padded to ``kernel_pad_to`` (Real-ESRGAN's dataset ``__getitem__``)."""
        o = self.opt
        size = int(rng.choice(self.kernel_sizes))
        if rng.uniform() < o['sinc_prob' + suffix]:
            # this sinc setting is for kernels of 7..21 (Real-ESRGAN)
            omega_c = rng.uniform(np.pi / 3, np.pi) if size < 13 else rng.uniform(np.pi / 5, np.pi)
            kernel = circular_lowpass_kernel(omega_c, size, pad_to=False)
        else:
            sigma = o['blur_sigma' + suffix]
            kernel = random_mixed_kernels(o['kernel_list' + suffix], o['kernel_prob' + suffix], size, sigma, sigma,
                                          [-math.pi, math.pi], o['betag_range' + suffix], o['betap_range' + suffix],
                                          noise_range=None)
        pad = (o['kernel_pad_to'] - size) // 2
        return np.pad(kernel, ((pad, pad), (pad, pad)))

    def _final_sinc(self, rng) -> np.ndarray:
        pad_to = self.opt['kernel_pad_to']
        if rng.uniform() < self.opt['final_sinc_prob']:
            size = int(rng.choice(self.kernel_sizes))
            return circular_lowpass_kernel(rng.uniform(np.pi / 3, np.pi), size, pad_to=pad_to)
        pulse = np.zeros((pad_to, pad_to))  # a pulse: no blur
        pulse[pad_to // 2, pad_to // 2] = 1
        return pulse

    def _resize_factor(self, rng, probs, value_range) -> float:
        kind = rng.choice(3, p=probs)
        if kind == 0:
            return rng.uniform(1, value_range[1])
        if kind == 1:
            return rng.uniform(value_range[0], 1)
        return 1.0

    def _noise(self, out, rng, suffix: str):
        o = self.opt
        if rng.uniform() < o['gaussian_noise_prob' + suffix]:
            return random_add_gaussian_noise_pt(out, sigma_range=o['noise_range' + suffix], clip=True, rounds=False,
                                                gray_prob=o['gray_noise_prob' + suffix])
        return random_add_poisson_noise_pt(out, scale_range=o['poisson_scale_range' + suffix],
                                           gray_prob=o['gray_noise_prob' + suffix], clip=True, rounds=False)

    def _jpeg(self, out, rng, quality_range):
        quality = rng.uniform(*quality_range)
        out = torch.clamp(out, 0, 1)
        if self.jpeger is not None:
            return self.jpeger(out, quality=out.new_tensor([quality]))
        img = jpeg_round_trip(tensor_to_uint8(out[0]), int(round(quality)), order='RGB').astype(np.float32) / 255.0
        return torch.from_numpy(img).permute(2, 0, 1)[None]

    def _interpolate(self, out, rng, size=None, scale_factor=None):
        mode = self.opt['resize_modes'][int(rng.integers(len(self.opt['resize_modes'])))]
        return F.interpolate(out, size=size, scale_factor=scale_factor, mode=mode)

    @torch.no_grad()
    def __call__(self, img: np.ndarray, scale: int, rng: np.random.Generator) -> np.ndarray:
        o = self.opt
        ori_h, ori_w = img.shape[:2]
        if ori_h % scale or ori_w % scale:
            raise ValueError(f'image size {ori_w}x{ori_h} is not divisible by scale {scale}')
        # basicsr's kernel and noise samplers read the global RNGs: seed them from rng for this call
        with seeded_global_rngs(rng):
            kernel1, kernel2, sinc = self._kernel(rng, ''), self._kernel(rng, '2'), self._final_sinc(rng)
            out = torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)).permute(2, 0, 1)[None]

            # first degradation: blur, resize, noise, JPEG
            out = blur(out, kernel1)
            out = self._interpolate(out, rng, scale_factor=self._resize_factor(rng, o['resize_prob'],
                                                                               o['resize_range']))
            out = self._noise(out, rng, '')
            out = self._jpeg(out, rng, o['jpeg_range'])

            # second degradation: blur, resize to (H/scale*r, W/scale*r), noise
            if rng.uniform() < o['second_blur_prob']:
                out = blur(out, kernel2)
            r = self._resize_factor(rng, o['resize_prob2'], o['resize_range2'])
            out = self._interpolate(out, rng, size=(max(1, int(ori_h / scale * r)), max(1, int(ori_w / scale * r))))
            out = self._noise(out, rng, '2')

            # [resize back + sinc] and JPEG in random order (Real-ESRGAN: other orders give twisted lines)
            size = (ori_h // scale, ori_w // scale)
            if rng.uniform() < 0.5:
                out = blur(self._interpolate(out, rng, size=size), sinc)
                out = self._jpeg(out, rng, o['jpeg_range2'])
            else:
                out = self._jpeg(out, rng, o['jpeg_range2'])
                out = blur(self._interpolate(out, rng, size=size), sinc)
            out = torch.clamp((out * 255.0).round(), 0, 255) / 255.0
        return out[0].permute(1, 2, 0).numpy()
