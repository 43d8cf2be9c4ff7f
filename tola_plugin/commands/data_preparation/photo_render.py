"""Render a synthetic "photo": several text lines at given angles on a light, uneven background, with the
ground-truth quadrilateral of each line. Used to test and illustrate line detection (docs/restore.md).

Returns uint8 RGB (H, W, 3), quadrilaterals (N, 4, 2) float32 (top-left, top-right, bottom-right, bottom-left of
each line's ink box, as read) and the ink mask (H, W) bool.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from tola_plugin.data.image_io import to_uint8
from tola_plugin.data.text_render import load_faces, system_cjk_fonts


@dataclass(frozen=True)
class PhotoLine:
    """text, rotation in degrees (counter-clockwise), centre (x, y) in pixels, glyph size in pixels."""
    text: str
    angle: float
    centre: Tuple[float, float]
    size: int


def _line_mask(text: str, font: ImageFont.FreeTypeFont) -> np.ndarray:
    left, top, right, bottom = font.getbbox(text)
    mask = Image.new('L', (right - left + 2, bottom - top + 2), 0)
    ImageDraw.Draw(mask).text((1 - left, 1 - top), text, font=font, fill=255)
    box = mask.getbbox()
    if box is None:
        raise ValueError(f'the font drew no ink for {text!r}')
    return np.asarray(mask.crop(box), np.float32) / 255.0


def render_photo(lines: Sequence[PhotoLine], height: int = 480, width: int = 640, seed: int = 0,
                 font_path: Optional[str] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``lines`` (dark ink) on a light background with a smooth gradient and mild noise."""
    paths = [font_path] if font_path else system_cjk_fonts()
    if not paths:
        raise FileNotFoundError('no font given and fontconfig lists no Chinese font (Debian: fonts-wqy-microhei)')
    faces = load_faces(paths)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = 215 + 25 * (xx / width) - 15 * (yy / height)
    background = np.stack([base, base - 8, base - 20], -1) + rng.normal(0, 3, (height, width, 3))
    alpha = np.zeros((height, width), np.float32)
    quads: List[np.ndarray] = []
    for line in lines:
        face = next((f for f in faces if f.covers(line.text)), None)
        if face is None:
            raise ValueError(f'no font covers {line.text!r}')
        mask = _line_mask(line.text, ImageFont.truetype(face.path, line.size, index=face.index))
        h, w = mask.shape
        # rotate the ink box about its centre and move it to line.centre (y grows downwards: angle sign flipped)
        matrix = cv2.getRotationMatrix2D((w / 2.0, h / 2.0), line.angle, 1.0)
        matrix[:, 2] += np.asarray(line.centre) - np.array([w / 2.0, h / 2.0])
        warped = cv2.warpAffine(mask, matrix, (width, height), flags=cv2.INTER_LINEAR)
        alpha = np.maximum(alpha, warped)
        corners = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
        quads.append(cv2.transform(corners[None], matrix)[0])
    ink = np.array([40, 35, 60], np.float32)
    photo = background * (1 - alpha[..., None]) + ink * alpha[..., None]
    return to_uint8(photo, peak=255.0), np.stack(quads).astype(np.float32), alpha > 0.5
