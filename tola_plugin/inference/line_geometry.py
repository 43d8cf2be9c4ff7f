"""Geometry of one text line of any size and aspect on TOLA's fixed 128x512 canvas.

The line is resized to the canvas height keeping its aspect (PIL bicubic on 8-bit RGB, as the datasets'
``canvas_rgb8``), never stretched. A line narrower than the canvas is padded (edge or reflect) to one canvas and
the pad is cropped off afterwards; a wider line is cut into overlapping canvas-wide windows, each restored on its
own (with its own text prior), and the restored windows are blended with linear ramps over their overlaps.
Written by hand: tiling libraries (e.g. Real-ESRGAN's ``tile``) cut square tiles with hard seams and no padding
rule for one-line strips.

Arrays are HWC: uint8 RGB for images, float32 in [0, 1] for canvases.
"""
import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np
from PIL import Image

from tola_plugin.data.text_line_source import CANVAS_H, CANVAS_W

PAD_MODES = ('edge', 'reflect')


@dataclass(frozen=True)
class LineLayout:
    """Where a line of ``width`` columns (at canvas height) sits on its canvases.

    starts: x offset in the line of each window (one window, offset 0, for a line no wider than the canvas).
    pad_left: padding columns left of a narrow line on its canvas (0 for a wide line).
    """
    width: int
    starts: Tuple[int, ...]
    pad_left: int
    canvas_w: int = CANVAS_W

    @property
    def num_tiles(self) -> int:
        return len(self.starts)


def line_width(height: int, width: int, canvas_h: int = CANVAS_H) -> int:
    """Width of an ``height`` x ``width`` image resized to ``canvas_h`` rows with its aspect kept (>= 1)."""
    if height < 1 or width < 1:
        raise ValueError(f'image size must be positive, got {height}x{width}')
    return max(1, int(round(width * canvas_h / height)))


def resize_rgb(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 RGB (h, w, 3) -> (height, width, 3), PIL bicubic (antialiased when shrinking); same size: unchanged."""
    if rgb.shape[:2] == (height, width):
        return rgb
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.BICUBIC))


def to_canvas_height(rgb: np.ndarray, canvas_h: int = CANVAS_H) -> np.ndarray:
    """uint8 RGB line -> uint8 RGB (canvas_h, line_width, 3), aspect kept."""
    return resize_rgb(rgb, canvas_h, line_width(rgb.shape[0], rgb.shape[1], canvas_h))


def plan_line(width: int, overlap: int, canvas_w: int = CANVAS_W) -> LineLayout:
    """Layout of a line ``width`` columns wide: centred on one padded canvas, or the fewest evenly spaced windows
    whose neighbours overlap by at least ``overlap`` columns (0 <= overlap < canvas_w)."""
    if not 0 <= overlap < canvas_w:
        raise ValueError(f'overlap must be in [0, {canvas_w - 1}] columns, got {overlap}')
    if width <= canvas_w:
        return LineLayout(width, (0, ), (canvas_w - width) // 2, canvas_w)
    count = math.ceil((width - overlap) / (canvas_w - overlap))
    starts = np.round(np.linspace(0, width - canvas_w, count)).astype(int)
    return LineLayout(width, tuple(int(s) for s in starts), 0, canvas_w)


def cut_tiles(line: np.ndarray, layout: LineLayout, pad_mode: str = 'edge') -> np.ndarray:
    """Line (H, width, C) -> its canvases (num_tiles, H, canvas_w, C): the padded line, or the windows."""
    if pad_mode not in PAD_MODES:
        raise ValueError(f'pad mode must be one of {PAD_MODES}, got {pad_mode!r}')
    if line.shape[1] != layout.width:
        raise ValueError(f'line is {line.shape[1]} columns wide, the layout expects {layout.width}')
    if layout.width <= layout.canvas_w:
        right = layout.canvas_w - layout.width - layout.pad_left
        return np.pad(line, ((0, 0), (layout.pad_left, right), (0, 0)), mode=pad_mode)[None]
    return np.stack([line[:, s:s + layout.canvas_w] for s in layout.starts])


def window_weights(layout: LineLayout) -> np.ndarray:
    """(num_tiles, canvas_w) float64 blending weights: 1 inside a window, a linear ramp from ~0 to 1 across the
    columns it shares with its left neighbour and from 1 to ~0 across those it shares with its right one (pixel
    centres, so no weight is exactly 0). Normalised by their sum when blending."""
    n, w = layout.num_tiles, layout.canvas_w
    x = np.arange(w) + 0.5
    weights = np.ones((n, w))
    for i, start in enumerate(layout.starts):
        if i > 0:
            shared = layout.starts[i - 1] + w - start  # columns shared with the left neighbour
            if shared > 0:
                weights[i] = np.minimum(weights[i], x / shared)
        if i < n - 1:
            shared = start + w - layout.starts[i + 1]
            if shared > 0:
                weights[i] = np.minimum(weights[i], (w - x) / shared)
    return np.clip(weights, 0.0, 1.0)


def blend_tiles(tiles: np.ndarray, layout: LineLayout) -> np.ndarray:
    """Restored canvases (num_tiles, H, canvas_w, C) float -> the line (H, width, C) float32: the narrow line's
    pad cropped off, or the windows blended with ``window_weights`` (normalised)."""
    if tiles.shape[0] != layout.num_tiles or tiles.shape[2] != layout.canvas_w:
        raise ValueError(f'expected {layout.num_tiles} canvases {layout.canvas_w} wide, got {tiles.shape}')
    if layout.width <= layout.canvas_w:
        return np.ascontiguousarray(tiles[0, :, layout.pad_left:layout.pad_left + layout.width], dtype=np.float32)
    weights = window_weights(layout)
    total = np.zeros((tiles.shape[1], layout.width, tiles.shape[3]))
    norm = np.zeros(layout.width)
    for tile, weight, start in zip(tiles, weights, layout.starts):
        total[:, start:start + layout.canvas_w] += tile * weight[None, :, None]
        norm[start:start + layout.canvas_w] += weight
    return (total / norm[None, :, None]).astype(np.float32)
