"""What every recognizer of ``tola_plugin.ocr`` takes and gives: a list of RGB uint8 (H, W, 3) line images in, one
``Recognition(text, confidence)`` per image out (the raw recognizer string: normalization is the metrics'; a
confidence in [0, 1])."""
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Recognition:
    text: str
    confidence: float


def check_rgb_images(images: Sequence[np.ndarray], what: str = 'recognizer input') -> None:
    """Each image must be an (H, W, 3) uint8 RGB array; the first that is not is a ValueError naming it."""
    for i, img in enumerate(images):
        if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(f'{what} {i}: expected an HxWx3 uint8 RGB array, got '
                             f'{getattr(img, "dtype", type(img))} {getattr(img, "shape", "")}')
