"""Geometry of text lines inside a photo: rectify a detected quadrilateral to a horizontal strip (perspective
warp), and paste a restored strip back into the photo with a feathered mask.

A quadrilateral is (4, 2) float32 (x, y) pixel coordinates in the order top-left, top-right, bottom-right,
bottom-left of the text as read (the detector's order). The strip of a quad is ``strip_size`` wide and high; a
strip at least 1.5x taller than wide (a vertical line) is read rotated by 90 degrees, as PaddleOCR/rapidocr do.
Images are uint8 RGB (H, W, 3).
"""
from typing import Tuple

import cv2
import numpy as np

from tola_plugin.data.image_io import to_uint8

VERTICAL_RATIO = 1.5  # PaddleOCR's rule: a crop this much taller than wide is a vertical line


def _side(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b))


def strip_size(quad: np.ndarray) -> Tuple[int, int]:
    """(height, width) of the horizontal strip of ``quad``: its longer opposite sides, rounded, >= 1."""
    width = max(_side(quad[0], quad[1]), _side(quad[3], quad[2]))
    height = max(_side(quad[0], quad[3]), _side(quad[1], quad[2]))
    return max(1, int(round(height))), max(1, int(round(width)))


def reading_quad(quad: np.ndarray) -> np.ndarray:
    """``quad`` as float32 (4, 2), its corners rolled by one for a vertical line (the strip then comes out
    rotated 90 degrees counter-clockwise: the line's top becomes the strip's left)."""
    quad = np.asarray(quad, np.float32).reshape(4, 2)
    height, width = strip_size(quad)
    return np.roll(quad, -1, axis=0) if height >= VERTICAL_RATIO * width else quad


def expand_quad(quad: np.ndarray, margin: float) -> np.ndarray:
    """``quad`` grown outwards by ``margin`` x its strip height on every side (each corner moved away along its two
    sides): context for the restorer around a tight detection, and room for the feathered border."""
    quad = np.asarray(quad, np.float64).reshape(4, 2)
    step = margin * strip_size(quad)[0]
    out = quad.copy()
    for i in range(4):
        for j in ((i + 1) % 4, (i + 3) % 4):
            side = quad[j] - quad[i]
            out[i] -= step * side / max(float(np.linalg.norm(side)), 1e-6)
    return out.astype(np.float32)


def _rect(height: int, width: int) -> np.ndarray:
    return np.float32([[0, 0], [width, 0], [width, height], [0, height]])


def rectify(image: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """The strip of ``quad`` (strip_size, uint8 RGB), warped out of ``image`` (bicubic, edges replicated)."""
    height, width = strip_size(quad)
    matrix = cv2.getPerspectiveTransform(np.float32(quad), _rect(height, width))
    return cv2.warpPerspective(image, matrix, (width, height), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)


def scale_quad(quad: np.ndarray, scale) -> np.ndarray:
    """``quad`` in an image resized by ``scale`` (one factor, or (x, y) factors), pixel centres kept aligned as
    cv2/PIL resizing does."""
    return ((np.asarray(quad, np.float64) + 0.5) * np.asarray(scale, np.float64) - 0.5).astype(np.float32)


def feather_mask(height: int, width: int, feather: float) -> np.ndarray:
    """float32 (height, width): 1 inside, falling to ~0 over ``feather`` pixels at every border along a smoothstep
    (3t² - 2t³: no kink where the fade starts or ends, so the eye finds no edge there)."""
    y = np.minimum(np.arange(height) + 0.5, height - np.arange(height) - 0.5)
    x = np.minimum(np.arange(width) + 0.5, width - np.arange(width) - 0.5)
    dist = np.minimum(y[:, None], x[None, :])
    t = np.clip(dist / max(float(feather), 1e-6), 0.0, 1.0)
    return (t * t * (3.0 - 2.0 * t)).astype(np.float32)


def paste_strip(photo: np.ndarray, strip: np.ndarray, quad: np.ndarray, feather: float) -> None:
    """Warp ``strip`` (uint8 RGB, any size) onto ``quad`` of ``photo`` (in place), blended with a feathered mask
    (``feather`` pixels of the strip as pasted). Only the quad's bounding box is touched."""
    quad = np.float32(quad)
    height, width = photo.shape[:2]
    x0, y0 = np.floor(quad.min(0)).astype(int)
    x1, y1 = np.ceil(quad.max(0)).astype(int) + 1
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, width), min(y1, height)
    if x1 <= x0 or y1 <= y0:
        return
    # The strip resized to about the quad's size first: warping alone would alias a strip much larger than the quad.
    target_h, target_w = strip_size(quad)
    if strip.shape[:2] != (target_h, target_w):
        shrink = target_h * target_w < strip.shape[0] * strip.shape[1]
        strip = cv2.resize(strip, (target_w, target_h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_CUBIC)
    matrix = cv2.getPerspectiveTransform(_rect(target_h, target_w), quad - np.float32([x0, y0]))
    size = (x1 - x0, y1 - y0)
    warped = cv2.warpPerspective(strip, matrix, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    alpha = cv2.warpPerspective(
        feather_mask(target_h, target_w, feather), matrix, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
        borderValue=0)[..., None]
    region = photo[y0:y1, x0:x1].astype(np.float32)
    photo[y0:y1, x0:x1] = to_uint8(alpha * warped + (1.0 - alpha) * region, 'half_up', peak=255.0)
