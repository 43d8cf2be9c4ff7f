"""Whether a restored line kept the colours of the line it would replace in a photo (``TOLAPipeline(paste='checked')``;
docs/restore.md, "Which lines are pasted"). Two CIELAB distances (ΔE76) between the median colour of a set of the
original strip's pixels and of the same pixels of the restored strip:

- ink: the original's ink (Otsu's threshold on its luminance; ink is the smaller side): strokes turned another colour;
- seam: the original's background in the outer ring of the strip (``ring`` x its height wide on every side, where the
  feathered border blends the restored line into the photo): a light or tinted box around the pasted line.

Strips are uint8 RGB (H, W, 3); the original is resized to the restored strip's size first.
"""
from dataclasses import dataclass

import cv2
import numpy as np

from tola_plugin.inference.line_geometry import resize_rgb

# Thresholds, ΔE76 (about 2.3: the least a viewer notices side by side), measured on the 100 lines of 25 rendered photos
# (tools/measure_photo_lines.py; docs/restore.md, "Which lines are pasted"). Ink: the rendered lines themselves, as a
# perfect restorer would return them, reach 15.7 (sharper strokes are darker than the blurred original's); the demo
# model's: 1.2-12.1 with the default 'luma' fix, purple with 'wavelet', 11-34 (median 25). Seam: the rendered lines
# reach 1.1, the demo model's 0.9 ('luma'), 1.8 ('wavelet'), 2.7-9.1 (median 5.0) with its own colours ('none').
INK_MAX_DELTA_E = 16.0
SEAM_MAX_DELTA_E = 3.0


@dataclass(frozen=True)
class ColourCheck:
    """ΔE76 of the median ink colour and of the median background colour of the outer ring (0.0 where the original
    has no such pixels)."""
    ink_delta_e: float
    seam_delta_e: float

    def refusal(self) -> str:
        """'' when both colours held (each ΔE at most its threshold), else why the line is not pasted."""
        if self.ink_delta_e > INK_MAX_DELTA_E:
            return f'ink colour moved: ΔE {self.ink_delta_e:.1f} > {INK_MAX_DELTA_E:g}'
        if self.seam_delta_e > SEAM_MAX_DELTA_E:
            return f'background at the seam moved (a box would show): ΔE {self.seam_delta_e:.1f} > {SEAM_MAX_DELTA_E:g}'
        return ''


def lab(rgb) -> np.ndarray:
    """sRGB colours, uint8 (..., 3) -> CIELAB (..., 3) float32 (L* in [0, 100], a*, b*; D65, cv2's conversion)."""
    rgb = np.asarray(rgb, np.float32)
    return cv2.cvtColor(rgb.reshape(-1, 1, 3) / 255.0, cv2.COLOR_RGB2Lab).reshape(rgb.shape)


def median_delta_e(original: np.ndarray, restored: np.ndarray, mask: np.ndarray) -> float:
    """ΔE76 between the per-channel median colours of ``original[mask]`` and ``restored[mask]`` (0.0: empty mask)."""
    if not mask.any():
        return 0.0
    medians = np.stack([np.median(original[mask], 0), np.median(restored[mask], 0)])
    a, b = lab(medians).astype(np.float64).reshape(2, 3)
    return float(np.linalg.norm(a - b))


def check_colours(original: np.ndarray, restored: np.ndarray, ring: float = 0.15) -> ColourCheck:
    """The ink and seam ΔE of ``restored`` against ``original`` (any size; resized to restored's). ``ring``: width of
    the outer ring as a fraction of the strip height (at least one pixel)."""
    height, width = restored.shape[:2]
    original = resize_rgb(original, height, width)
    gray = cv2.cvtColor(original, cv2.COLOR_RGB2GRAY)
    _, dark = cv2.threshold(gray, 0, 1, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    dark = dark.astype(bool)
    ink = dark if dark.sum() * 2 <= dark.size else ~dark
    outer = np.ones((height, width), bool)
    r = max(1, int(round(ring * height)))
    outer[r:height - r, r:width - r] = False
    return ColourCheck(median_delta_e(original, restored, ink), median_delta_e(original, restored, outer & ~ink))
