"""The paper's image metrics as BasicSR validation metrics (registered in METRIC_REGISTRY).

Option file use (``val.metrics``)::

    psnr: {type: calculate_tola_psnr, better: higher}     # luminance (YCbCr BT.601) PSNR, no border crop
    ssim: {type: calculate_tola_ssim, better: higher}
    lpips: {type: calculate_tola_lpips, better: lower}    # AlexNet, local weights only
    dists: {type: calculate_tola_dists, better: lower}

BasicSR calls them with ``img``, ``img2`` = HxWx3 uint8 BGR arrays (restored, reference) plus the remaining
option keys (``better``, ...), hence ``**kwargs``. Networks are built once per (metric, device, colour space).
"""
import functools
from typing import Optional

import numpy as np

from basicsr.utils.registry import METRIC_REGISTRY

from tola_plugin.data.image_io import convert_order
from tola_plugin.metric_weights import METRIC_TYPES
from tola_plugin.metrics.image_metrics import DEFAULT_COLOR_SPACE, PairedImageMetrics, images_to_tensor
from tola_plugin.utils.devices import resolve_device

# Registered metric -> the pyiqa metric whose local weight files it needs; a run's are checked at start
# (metric_weights.require_run_weights, called by the launchers).
WEIGHTED_METRICS = METRIC_TYPES


def _device(device: Optional[str]) -> str:
    return str(resolve_device(device))


@functools.lru_cache(maxsize=None)
def _metric(name: str, device: str, color_space: str) -> PairedImageMetrics:
    return PairedImageMetrics((name, ), device=device, color_space=color_space)


def _score(name: str, img: np.ndarray, img2: np.ndarray, device: Optional[str], color_space: str, crop_border: int,
           test_y_channel: bool) -> float:
    if not test_y_channel:
        raise ValueError(f'calculate_tola_{name} always measures luminance; remove test_y_channel: false '
                         f'(use BasicSR calculate_{name} for RGB)')
    if crop_border:
        if crop_border < 0 or 2 * crop_border >= min(img.shape[:2]):
            raise ValueError(f'calculate_tola_{name}: crop_border {crop_border} does not fit {img.shape[:2]}')
        img = img[crop_border:-crop_border, crop_border:-crop_border]
        img2 = img2[crop_border:-crop_border, crop_border:-crop_border]
    if img.shape != img2.shape:
        raise ValueError(f'calculate_tola_{name}: image shapes differ: {img.shape} and {img2.shape}')
    x = images_to_tensor([convert_order(img, 'BGR', 'RGB')])
    y = images_to_tensor([convert_order(img2, 'BGR', 'RGB')])
    return float(_metric(name, _device(device), color_space)(x, y)[name][0])


@METRIC_REGISTRY.register()
def calculate_tola_psnr(img, img2, crop_border=0, color_space=DEFAULT_COLOR_SPACE, test_y_channel=True, device=None,
                        **kwargs) -> float:
    """PSNR (dB) on luminance (default YCbCr BT.601 Y), data range 1, no border crop by default."""
    return _score('psnr', img, img2, device, color_space, crop_border, test_y_channel)


@METRIC_REGISTRY.register()
def calculate_tola_ssim(img, img2, crop_border=0, color_space=DEFAULT_COLOR_SPACE, test_y_channel=True, device=None,
                        **kwargs) -> float:
    """SSIM on 8-bit luminance (pyiqa 'ssim'), no border crop by default."""
    return _score('ssim', img, img2, device, color_space, crop_border, test_y_channel)


@METRIC_REGISTRY.register()
def calculate_tola_lpips(img, img2, crop_border=0, device=None, **kwargs) -> float:
    """LPIPS v0.1 AlexNet (lower is better); needs alexnet-owt-7be5be79.pth in $TORCH_HOME/hub/checkpoints."""
    return _score('lpips', img, img2, device, DEFAULT_COLOR_SPACE, crop_border, True)


@METRIC_REGISTRY.register()
def calculate_tola_dists(img, img2, crop_border=0, device=None, **kwargs) -> float:
    """DISTS (lower is better); needs vgg16-397923af.pth and DISTS_weights-f5e65c96.pth locally."""
    return _score('dists', img, img2, device, DEFAULT_COLOR_SPACE, crop_border, True)
