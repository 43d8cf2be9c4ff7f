"""Image metrics of the paper through pyiqa: PSNR, SSIM, LPIPS-AlexNet, DISTS per image, FID per directory pair; and
the package's one home of PSNR: the pyiqa metric below, ``psnr_y8`` / ``mean_psnr_y8`` (BasicSR's, on 8-bit images:
what validation logs and the demo reports) and ``float_psnr`` (all channels of float images: the benchmarks'
agreement between routes).

Luminance: PSNR and SSIM are computed on the Y channel of **YCbCr (ITU-R BT.601, limited range:
Y = 16/255 + (65.481 R + 128.553 G + 24.966 B)/255 for RGB in [0,1])**, without border crop. This is
BasicSR's / MATLAB's ``rgb2ycbcr`` (``test_y_channel=True``), the convention of the super-resolution and
text-SR line of work that DiffTSR and TOLA report against; pyiqa's own default (YIQ, full-range luma) is
available as ``color_space='yiq'``. pyiqa's SSIM rounds Y to 8-bit levels (data range 255) and uses an
11x11 Gaussian window (sigma 1.5) with 'valid' filtering; PSNR uses data range 1 and no rounding.

Inputs everywhere: float tensors (B,3,H,W), RGB, values in [0,1]; restored and reference of the same size.
"""
import math
import os
import tempfile
from typing import Dict, Iterable, Optional, Sequence

import numpy as np
import torch

from tola_plugin import metric_weights as W
from tola_plugin.data.image_io import (DEFAULT_MAX_PIXELS, WHITE, convert_order, list_image_files, read_image_file,
                                       write_image)

LUMA_COLOR_SPACES = ('ycbcr', 'yiq')
DEFAULT_COLOR_SPACE = 'ycbcr'
PAIRED_METRICS = ('psnr', 'ssim', 'lpips', 'dists')


def psnr_y8(pred: np.ndarray, ref: np.ndarray) -> float:
    """PSNR (dB; inf when equal) of two uint8 (H, W, 3) RGB images on the BT.601 Y channel, no border crop: BasicSR's
    ``calculate_psnr``, what TOLA's validation logs (the pyiqa metrics below give the same convention on float
    images). BasicSR's Y conversion reads BGR: the channels are swapped for it, here."""
    from basicsr.metrics import calculate_psnr
    return calculate_psnr(
        convert_order(pred, 'RGB', 'BGR'), convert_order(ref, 'RGB', 'BGR'), crop_border=0, test_y_channel=True)


def mean_psnr_y8(pred: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> float:
    """Mean ``psnr_y8`` over pairs of uint8 RGB images."""
    return float(np.mean([psnr_y8(p, r) for p, r in zip(pred, ref)]))


def float_psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR (dB; inf when equal) of two float images (any equal shape, values in [0, 1], data range 1) over all
    their values, in float64."""
    mse = float(((a.double() - b.double())**2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def _check_color_space(color_space: str) -> str:
    if color_space not in LUMA_COLOR_SPACES:
        raise ValueError(f'color_space must be one of {LUMA_COLOR_SPACES}, got {color_space!r}')
    return color_space


def build_paired_metric(name: str, device: str = 'cpu', color_space: str = DEFAULT_COLOR_SPACE):
    """Build one pyiqa full-reference metric from local weights only.

    name: 'psnr' | 'ssim' (luminance, no crop) | 'lpips' (AlexNet, v0.1) | 'dists'.
    Raises FileNotFoundError before construction when a weight file is missing (see ``weights``).
    """
    import pyiqa
    _check_color_space(color_space)
    with W.no_downloads():
        if name == 'psnr':
            return pyiqa.create_metric('psnr', device=device, test_y_channel=True, color_space=color_space,
                                       crop_border=0)
        if name == 'ssim':
            return pyiqa.create_metric('ssim', device=device, test_y_channel=True, color_space=color_space,
                                       crop_border=0, downsample=False)
        if name == 'lpips':
            W.require_metric_weights('lpips')
            metric = pyiqa.create_metric('lpips', device=device, net='alex', version='0.1',
                                         pretrained_model_path=W.weight_path(W.LPIPS_ALEX_LINEAR))
            W.assert_loaded(metric.net, W.weight_path(W.LPIPS_ALEX_LINEAR), 'LPIPS linear layers')
            return metric
        if name == 'dists':
            W.require_metric_weights('dists')
            metric = pyiqa.create_metric('dists', device=device, pretrained_model_path=W.weight_path(W.DISTS_WEIGHTS))
            W.assert_loaded(metric.net, W.weight_path(W.DISTS_WEIGHTS), 'DISTS weights')
            return metric
    raise ValueError(f'unknown paired image metric {name!r}; expected one of {PAIRED_METRICS}')


class PairedImageMetrics:
    """Per-image PSNR/SSIM/LPIPS/DISTS with networks built once.

    ``metrics(restored, reference)`` -> {name: float64 array (B,)}; inputs (B,3,H,W) RGB in [0,1].
    """

    def __init__(self, names: Sequence[str] = PAIRED_METRICS, device: str = 'cpu',
                 color_space: str = DEFAULT_COLOR_SPACE):
        unknown = [n for n in names if n not in PAIRED_METRICS]
        if unknown:
            raise ValueError(f'unknown paired image metric(s) {unknown}; expected a subset of {PAIRED_METRICS}')
        self.names = tuple(names)
        self.device = device
        self.color_space = color_space
        self._metrics = {n: build_paired_metric(n, device, color_space) for n in self.names}

    @torch.no_grad()
    def __call__(self, restored: torch.Tensor, reference: torch.Tensor) -> Dict[str, np.ndarray]:
        if restored.shape != reference.shape or restored.dim() != 4 or restored.shape[1] != 3:
            raise ValueError(f'restored {tuple(restored.shape)} and reference {tuple(reference.shape)} must both '
                             f'be (B,3,H,W) of the same size')
        out = {}
        for name, metric in self._metrics.items():
            # Exact metrics in float64 (the 8-bit rounding inside SSIM is then exact); networks in float32.
            dtype = torch.float64 if name in ('psnr', 'ssim') else torch.float32
            score = metric(restored.to(self.device, dtype), reference.to(self.device, dtype))
            out[name] = score.detach().reshape(restored.shape[0]).double().cpu().numpy()
        return out


def stage_images(folder: str, names: Sequence[str], out_dir: str, background: Sequence[int] = WHITE,
                 max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> str:
    """Write ``names`` of ``folder`` into ``out_dir`` as 8-bit RGB PNGs read through the package's one image
    reader (``data/image_io.py``: transparency over ``background``, 16-bit, EXIF, CMYK), so that a metric that
    opens files itself (pyiqa's FID uses PIL's ``convert('RGB')``, which turns a transparent background black)
    sees exactly the pixels the other metrics see. Returns ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    for i, name in enumerate(names):
        write_image(
            os.path.join(out_dir, f'{i:06d}.png'), read_image_file(os.path.join(folder, name), background, max_pixels))
    return out_dir


def fid_between_dirs(restored_dir: str, reference_dir: str, device: str = 'cpu', batch_size: int = 8,
                     num_workers: int = 0, mode: str = 'clean', verbose: bool = False,
                     names: Optional[Sequence[str]] = None, background: Sequence[int] = WHITE,
                     restored_names: Optional[Sequence[str]] = None,
                     max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> float:
    """FID between two folders, computed once (pyiqa 'fid': InceptionV3 pool3, 2048-d features, clean-fid
    resizing, Frechet distance with scipy's matrix square root, ~1 min on a 2-core CPU).

    ``names``: the images to compare (default: every image directly inside each folder; ``restored_names``: other
    names for the restored folder's files, e.g. BasicSR's suffixed ones). They are staged through the package's image
    reader first (``stage_images``), so pyiqa sees exactly those files and pixels.
    """
    import pyiqa
    W.require_metric_weights('fid')
    with W.no_downloads():
        metric = pyiqa.create_metric('fid', device=device)
    with tempfile.TemporaryDirectory(prefix='tola_fid_') as tmp:
        dirs = []
        for side, folder, side_names in (('restored', restored_dir, restored_names
                                          or names), ('reference', reference_dir, names)):
            listed = side_names if side_names is not None else list_image_files(folder)
            dirs.append(stage_images(folder, listed, os.path.join(tmp, side), background, max_pixels))
        return float(
            metric(dirs[0], dirs[1], mode=mode, batch_size=batch_size, num_workers=num_workers, verbose=verbose))


def images_to_tensor(images_rgb: Iterable[np.ndarray]) -> torch.Tensor:
    """List of HxWx3 uint8 RGB arrays (same size) -> (B,3,H,W) float64 in [0,1] (exact k/255 values; the
    networks get a float32 copy)."""
    arrays = [np.asarray(img) for img in images_rgb]
    for arr in arrays:
        if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
            raise ValueError(f'expected HxWx3 uint8 images, got dtype {arr.dtype} shape {arr.shape}')
    batch = np.stack(arrays).astype(np.float64) / 255.0
    return torch.from_numpy(batch).permute(0, 3, 1, 2).contiguous()
