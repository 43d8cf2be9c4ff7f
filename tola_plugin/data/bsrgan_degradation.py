"""BSRGAN's degradation (cszn/BSRGAN: utils/utils_blindsr.py ``degradation_bsrgan``) for one image.

Written here because basicsr has no BSRGAN operation. Defaults are DiffTSR's variant
(YuzheZhang-1999/DiffTSR: train/dataset/utils/real_esrgan_bsrgan_degradation.py ``bsrgan_degradation``);
cszn's originals are given in the comments. Differences from both, on purpose:
- all randomness comes from one numpy Generator (reproducible per sample);
- ``shift_pixel`` uses bilinear ``RectBivariateSpline`` instead of scipy's removed ``interp2d``;
- scipy ``ndimage.convolve(mode='mirror')`` is done by ``cv2.filter2D`` with BORDER_REFLECT_101 and the
  flipped kernel (same result, faster), the anisotropic Gaussian is evaluated vectorised;
- the camera-ISP step is omitted (it needs an ISP model that neither repository ships), no random crop.
"""
import cv2
import numpy as np
from scipy.interpolate import RectBivariateSpline
from scipy.linalg import orth

from basicsr.utils.matlab_functions import imresize as matlab_imresize

from tola_plugin.data.image_io import jpeg_round_trip, to_uint8
from tola_plugin.data.realesrgan_degradation import merge_options

BSRGAN_DEFAULTS = {
    'scale2_prob': 0.25,  # x4 only: pre-downsample by 2, then continue as x2
    'aniso_blur_prob': 0.3,  # cszn 0.5
    'blur_ksize_half_range': [2, 11],  # kernel size = 2*randint(lo, hi)+3
    'aniso_l_base': 4.0,  # eigenvalues l1, l2 ~ U(0, base + sf)
    'iso_sigma_base': 2.0,  # isotropic sigma ~ U(0, base + per_sf*sf)
    'iso_sigma_per_sf': 0.2,
    'downsample_resize_prob': 0.75,  # else shifted-Gaussian blur + nearest decimation
    'shift_kernel_size': 25,
    'shift_sigma_range': [0.1, 0.6],  # times sf
    'noise_level_range': [3, 25],  # cszn [2, 25]; integer levels /255
    'noise_type_probs': [0.4, 0.4, 0.2],  # color, gray, channel-correlated
    'jpeg_prob': 0.8,  # cszn 0.9
    'jpeg_quality_range': [30, 85],  # cszn [30, 95]; integers, inclusive
    'final_jpeg_prob': 0.4,  # cszn 1.0
}

_CV2_INTER = [cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_AREA]  # BSRGAN's random.choice([1, 2, 3])


def isotropic_gaussian_kernel(size: int, sigma: float) -> np.ndarray:
    """MATLAB ``fspecial('gaussian', size, sigma)``; sigma <= 0 gives a delta."""
    half = (size - 1) / 2.0
    y, x = np.mgrid[-half:half + 1, -half:half + 1]
    if sigma <= 0:
        return ((x == 0) & (y == 0)).astype(np.float64)
    k = np.exp(-(x * x + y * y) / (2 * sigma * sigma))
    k[k < np.finfo(float).eps * k.max()] = 0
    return k / k.sum()


def anisotropic_gaussian_kernel(size: int, theta: float, l1: float, l2: float) -> np.ndarray:
    """BSRGAN ``anisotropic_Gaussian``: covariance V diag(l1,l2) V^-1, V the reflection at angle theta."""
    v = np.array([np.cos(theta), np.sin(theta)])
    rot = np.array([[v[0], v[1]], [v[1], -v[0]]])
    cov = rot @ np.diag([l1, l2]) @ np.linalg.inv(rot)
    half = (size - 1) / 2.0
    y, x = np.mgrid[-half:half + 1, -half:half + 1]
    xy = np.stack([x, y], -1)
    k = np.exp(-0.5 * np.einsum('...i,ij,...j->...', xy, np.linalg.inv(cov), xy))
    return k / k.sum()


def shift_pixel(x: np.ndarray, sf: int, upper_left: bool = True) -> np.ndarray:
    """BSRGAN ``shift_pixel``: resample (H,W) or (H,W,C) by (sf-1)/2 pixels with bilinear interpolation."""
    h, w = x.shape[:2]
    shift = (sf - 1) * 0.5
    xv, yv = np.arange(0, w, 1.0), np.arange(0, h, 1.0)
    x1 = np.clip(xv + shift if upper_left else xv - shift, 0, w - 1)
    y1 = np.clip(yv + shift if upper_left else yv - shift, 0, h - 1)
    out = np.empty_like(x, dtype=np.float64)
    planes = [x] if x.ndim == 2 else [x[..., i] for i in range(x.shape[-1])]
    for i, plane in enumerate(planes):
        res = RectBivariateSpline(yv, xv, plane, kx=1, ky=1)(y1, x1)
        if x.ndim == 2:
            out[:] = res
        else:
            out[..., i] = res
    return out


def convolve_mirror(img: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """scipy ``ndimage.convolve(img, kernel[..., None], mode='mirror')`` per channel."""
    return cv2.filter2D(img, -1, np.ascontiguousarray(kernel[::-1, ::-1]), borderType=cv2.BORDER_REFLECT_101)


class BSRGANDegradation:
    """``__call__(img, scale, rng)``: RGB float32 (H,W,3) in [0,1] -> RGB float32 (H//scale, W//scale, 3)
    in [0,1] (8-bit levels where a JPEG step ran last). All randomness comes from ``rng``.
    """

    def __init__(self, **opt):
        self.opt = merge_options(BSRGAN_DEFAULTS, opt, 'bsrgan')
        probs = self.opt['noise_type_probs']
        if len(probs) != 3 or not np.isclose(sum(probs), 1.0) or min(probs) < 0:
            raise ValueError(f'noise_type_probs must be 3 probabilities summing to 1, got {probs}')

    def _blur(self, img, sf, rng):
        o = self.opt
        size = 2 * int(rng.integers(o['blur_ksize_half_range'][0], o['blur_ksize_half_range'][1] + 1)) + 3
        if rng.uniform() < o['aniso_blur_prob']:
            l_max = o['aniso_l_base'] + sf
            l1, l2 = l_max * rng.uniform(), l_max * rng.uniform()
            k = anisotropic_gaussian_kernel(size, rng.uniform() * np.pi, l1, l2)
        else:
            k = isotropic_gaussian_kernel(size, (o['iso_sigma_base'] + o['iso_sigma_per_sf'] * sf) * rng.uniform())
        return convolve_mirror(img, k)

    def _downsample(self, img, sf, rng):
        """BSRGAN op 2: resize by 1/U(1, 2sf), or shifted-Gaussian blur + nearest decimation by sf."""
        o = self.opt
        if rng.uniform() < o['downsample_resize_prob']:
            sf1 = rng.uniform(1, 2 * sf)
            size = (max(1, int(img.shape[1] / sf1)), max(1, int(img.shape[0] / sf1)))
            img = cv2.resize(img, size, interpolation=_CV2_INTER[int(rng.integers(3))])
        else:
            lo, hi = o['shift_sigma_range']
            k = isotropic_gaussian_kernel(o['shift_kernel_size'], rng.uniform(lo, hi * sf))
            k = shift_pixel(k, sf)
            img = convolve_mirror(img, k / k.sum())[0::sf, 0::sf, ...]
        return np.clip(img, 0.0, 1.0)

    def _gaussian_noise(self, img, rng):
        o = self.opt
        lo, hi = o['noise_level_range']
        level = int(rng.integers(lo, hi + 1)) / 255.0
        kind = rng.choice(3, p=o['noise_type_probs'])
        if kind == 0:  # color
            img = img + rng.normal(0, level, img.shape).astype(np.float32)
        elif kind == 1:  # gray
            img = img + rng.normal(0, level, (*img.shape[:2], 1)).astype(np.float32)
        else:  # channel-correlated; BSRGAN uses the range maximum here, kept as is
            d = np.diag(rng.uniform(size=3))
            u = orth(rng.uniform(size=(3, 3)))
            cov = np.abs((hi / 255.0)**2 * (u.T @ d @ u))
            # np.abs can break positive semi-definiteness (BSRGAN quirk): sample without the check/warning
            img = img + rng.multivariate_normal([0, 0, 0], cov, img.shape[:2], check_valid='ignore').astype(np.float32)
        return np.clip(img, 0.0, 1.0)

    def _jpeg(self, img, rng):
        lo, hi = self.opt['jpeg_quality_range']
        quality = int(rng.integers(lo, hi + 1))
        return jpeg_round_trip(to_uint8(img), quality, order='RGB').astype(np.float32) / 255.0

    def __call__(self, img: np.ndarray, scale: int, rng: np.random.Generator) -> np.ndarray:
        o = self.opt
        h, w = img.shape[:2]
        if h % scale or w % scale:
            raise ValueError(f'image size {w}x{h} is not divisible by scale {scale}')
        img = np.ascontiguousarray(img, dtype=np.float32)
        sf = scale
        if sf == 4 and rng.uniform() < o['scale2_prob']:
            if rng.uniform() < 0.5:
                img = cv2.resize(img, (w // 2, h // 2), interpolation=[*_CV2_INTER,
                                                                       cv2.INTER_LANCZOS4][int(rng.integers(4))])
            else:
                img = matlab_imresize(img, 1 / 2).astype(np.float32)
            img = np.clip(img, 0.0, 1.0)
            sf = 2

        # ops 0..5 in random order with the downsample (2) before the resize to 1/sf (3)
        order = [int(i) for i in rng.permutation(6)]
        i2, i3 = order.index(2), order.index(3)
        if i2 > i3:
            order[i2], order[i3] = order[i3], order[i2]
        pre_h, pre_w = img.shape[:2]
        for op in order:
            if op in (0, 1):
                img = self._blur(img, sf, rng)
            elif op == 2:
                pre_h, pre_w = img.shape[:2]
                img = self._downsample(img, sf, rng)
            elif op == 3:
                img = cv2.resize(img, (pre_w // sf, pre_h // sf), interpolation=_CV2_INTER[int(rng.integers(3))])
                img = np.clip(img, 0.0, 1.0)
            elif op == 4:
                img = self._gaussian_noise(img, rng)
            elif op == 5 and rng.uniform() < o['jpeg_prob']:
                img = self._jpeg(img, rng)
        if rng.uniform() < o['final_jpeg_prob']:
            img = self._jpeg(img, rng)
        return np.clip(img, 0.0, 1.0).astype(np.float32)
