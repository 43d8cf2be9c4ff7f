"""Colour kept: the restored image's colours matched to its input's, as StableSR and OSEDiff post-process their
outputs (their ``wavelet_color_fix`` / ``adain_color_fix``, from sd-webui-stablesr's colorfix.py). Off by default:
the paper's outputs are the network's own (``TOLAPipeline(color_fix=...)``, ``--color-fix``; docs/restore.md).

- 'wavelet': the restored image's high frequencies on the input's low frequencies. Both are split by the same
  5-level à trous wavelet (a 3x3 binomial blur dilated by 1, 2, 4, 8, 16 pixels, edges replicated): whatever the
  network changed in colour or brightness over areas of about 32 pixels and more goes back to the input's,
  strokes and edges stay the network's.
- 'luma': the input's colours with the network's strokes in luminance only: the input plus the difference of the
  two images' BT.601 luma (Y = 0.299 R + 0.587 G + 0.114 B) detail levels, the same 5-level wavelet's. Adding one
  amount to R, G and B moves Y alone (Cb ∝ B − Y and Cr ∝ R − Y are kept), so every pixel keeps the input's
  chroma: the network's stroke colours (fine detail that 'wavelet' keeps: the demo model's purple ink) never show,
  as SR methods restoring Y only and upscaling Cb, Cr have done since SRCNN. Luma is 'wavelet''s exactly
  (before clamping).
- 'adain': each colour channel of the restored image shifted and scaled to the input's mean and standard deviation
  over the whole canvas (adaptive instance normalisation): a global tint or contrast change is undone, nothing
  local.

Both work on batches of 128x512 canvases, (B, 3, H, W) RGB in [0, 1], the input canvas (the LR line resized to
the canvas) as the reference; the result is clamped to [0, 1]. Hand-written: a few tensor operations (the two
projects ship them as scripts, not as a library).
"""
import torch
import torch.nn.functional as F

COLOR_FIXES = ('none', 'wavelet', 'luma', 'adain')
LUMA_WEIGHTS = (0.299, 0.587, 0.114)  # BT.601, the luma PSNR-Y is computed on (up to BasicSR's range scaling)
WAVELET_LEVELS = 5
ADAIN_EPS = 1e-5  # added to the variance, as StableSR's calc_mean_std


def check_color_fix(name: str) -> str:
    if name not in COLOR_FIXES:
        raise ValueError(f'color_fix must be one of {COLOR_FIXES}, got {name!r}')
    return name


def wavelet_low_frequency(image: torch.Tensor, levels: int = WAVELET_LEVELS) -> torch.Tensor:
    """The coarsest level of the à trous decomposition: ``levels`` binomial 3x3 blurs, the k-th dilated by 2**k,
    edges replicated. (B, C, H, W) -> the same shape. image - this = the sum of the detail levels."""
    kernel = torch.tensor([1.0, 2.0, 1.0], dtype=image.dtype, device=image.device)
    kernel = (kernel[:, None] * kernel[None, :]) / 16.0
    kernel = kernel.expand(image.shape[1], 1, 3, 3)
    low = image
    for level in range(levels):
        step = 2**level
        padded = F.pad(low, (step, step, step, step), mode='replicate')
        low = F.conv2d(padded, kernel, dilation=step, groups=image.shape[1])
    return low


def wavelet_color_fix(restored: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """restored's detail levels on reference's coarsest level (both (B, 3, H, W)), clamped to [0, 1]."""
    fixed = restored - wavelet_low_frequency(restored) + wavelet_low_frequency(reference)
    return fixed.clamp(0.0, 1.0)


def luma_color_fix(restored: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """reference plus the difference of restored's and reference's luma detail levels, added to each channel (both
    (B, 3, H, W)), clamped to [0, 1]: reference's chroma, wavelet_color_fix's luma."""
    weights = torch.tensor(LUMA_WEIGHTS, dtype=restored.dtype, device=restored.device).view(1, 3, 1, 1)
    luma_r, luma_ref = (x.mul(weights).sum(1, keepdim=True) for x in (restored, reference))
    detail = luma_r - wavelet_low_frequency(luma_r) - (luma_ref - wavelet_low_frequency(luma_ref))
    return (reference + detail).clamp(0.0, 1.0)


def adain_color_fix(restored: torch.Tensor, reference: torch.Tensor, eps: float = ADAIN_EPS) -> torch.Tensor:
    """restored with each image's channel means and standard deviations (unbiased, + eps under the root) replaced by
    reference's, clamped to [0, 1]."""
    dims = (2, 3)
    mean_r, std_r = restored.mean(dims, keepdim=True), (restored.var(dims, keepdim=True) + eps).sqrt()
    mean_ref, std_ref = reference.mean(dims, keepdim=True), (reference.var(dims, keepdim=True) + eps).sqrt()
    return ((restored - mean_r) / std_r * std_ref + mean_ref).clamp(0.0, 1.0)


def apply_color_fix(name: str, restored: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``restored`` after the colour fix ``name`` (one of COLOR_FIXES; 'none' returns it unchanged)."""
    check_color_fix(name)
    if name == 'none':
        return restored
    if restored.shape != reference.shape:
        raise ValueError(f'color fix: restored {tuple(restored.shape)} and reference {tuple(reference.shape)} differ')
    return {'wavelet': wavelet_color_fix, 'luma': luma_color_fix, 'adain': adain_color_fix}[name](restored, reference)
