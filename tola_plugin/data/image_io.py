"""The one image reader of the package: encoded bytes or a file -> BGR uint8 (H, W, 3), whatever the file holds;
and the one image lister (``list_image_files``: which files of a folder are images).

Datasets, inference, evaluation and the tools all read through ``decode_image`` / ``read_image_file``:
- 8-bit, 16-bit (scaled to 8 bits) and float images (values in [0, 1]), grayscale or colour, palette images, CMYK
  JPEGs (OpenCV converts them to BGR);
- an alpha channel is composited over ``background`` (white by default): a transparent background never turns
  black, and a half-transparent stroke keeps its shade;
- the EXIF orientation is applied (as PIL's ``ImageOps.exif_transpose``), so a phone photo is read upright;
- anything else (no bytes, truncated, not an image) is a ValueError naming the file.
"""
import io
import os
from typing import List, Sequence

import cv2
import numpy as np
from PIL import Image

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.webp', '.tif', '.tiff')  # lower case
WHITE = (255, 255, 255)
_EXIF_ORIENTATION = 0x0112


def _to_uint8(img: np.ndarray, what: str) -> np.ndarray:
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:
        return ((img.astype(np.uint32) + 128) // 257).astype(np.uint8)  # 65535 -> 255, rounded
    if img.dtype in (np.float32, np.float64):
        return (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    raise ValueError(f'{what}: unsupported pixel type {img.dtype} (expected 8-bit, 16-bit or float in [0, 1])')


def _composite(bgra: np.ndarray, background: Sequence[int]) -> np.ndarray:
    """BGRA uint8 -> BGR uint8 over an RGB ``background`` colour."""
    alpha = bgra[..., 3:4].astype(np.float32) / 255.0
    back = np.array(background[::-1], np.float32).reshape(1, 1, 3)  # RGB option -> BGR
    out = bgra[..., :3].astype(np.float32) * alpha + back * (1.0 - alpha)
    return (out + 0.5).astype(np.uint8)


def _exif_orientation(data: bytes) -> int:
    try:
        with Image.open(io.BytesIO(data)) as im:
            return int(im.getexif().get(_EXIF_ORIENTATION, 1))
    except Exception:  # no EXIF block or a format PIL does not parse: nothing to rotate
        return 1


def _orient(img: np.ndarray, orientation: int) -> np.ndarray:
    """Apply an EXIF orientation (1-8), as PIL's ``ImageOps.exif_transpose``."""
    ops = {
        2: lambda x: x[:, ::-1], 3: lambda x: x[::-1, ::-1], 4: lambda x: x[::-1], 5: lambda x: x.swapaxes(0, 1),
        6: lambda x: np.rot90(x, -1), 7: lambda x: x[::-1, ::-1].swapaxes(0, 1), 8: lambda x: np.rot90(x, 1)
    }
    return np.ascontiguousarray(ops[orientation](img)) if orientation in ops else img


def convert_array(img: np.ndarray, what: str, background: Sequence[int] = WHITE, order: str = 'BGR') -> np.ndarray:
    """An in-memory image -> BGR uint8 (H, W, 3), by the rules of ``decode_image`` (no EXIF: arrays have none).

    img: (H, W) gray, (H, W, 2) gray + alpha, (H, W, 3) colour or (H, W, 4) colour + alpha; uint8, uint16 or float
    in [0, 1]. order: 'BGR' (OpenCV's) or 'RGB' (PIL's, numpy users') channel order of ``img``.
    """
    if len(background) != 3 or not all(0 <= int(c) <= 255 for c in background):
        raise ValueError(f'background must be an RGB colour of three values in [0, 255], got {background!r}')
    if order not in ('BGR', 'RGB'):
        raise ValueError(f"channel order must be 'BGR' or 'RGB', got {order!r}")
    if not isinstance(img, np.ndarray) or img.ndim not in (2, 3) or img.size == 0:
        raise ValueError(f'{what}: expected an (H, W) or (H, W, C) image array, got {type(img).__name__} '
                         f'{getattr(img, "shape", "")}')
    img = _to_uint8(img, what)
    if img.ndim == 3 and img.shape[2] in (3, 4) and order == 'RGB':
        img = img[..., [2, 1, 0] + ([3] if img.shape[2] == 4 else [])]
    if img.ndim == 2:
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    elif img.shape[2] == 1:
        img = cv2.cvtColor(img[..., 0], cv2.COLOR_GRAY2BGR)
    elif img.shape[2] == 2:  # gray + alpha
        img = _composite(np.dstack([img[..., :1].repeat(3, 2), img[..., 1:]]), background)
    elif img.shape[2] == 4:
        img = _composite(img, background)
    elif img.shape[2] != 3:
        raise ValueError(f'{what}: {img.shape[2]} channels (expected gray, colour or colour + alpha)')
    return np.ascontiguousarray(img)


def decode_image(data: bytes, what: str, background: Sequence[int] = WHITE) -> np.ndarray:
    """Encoded bytes -> BGR uint8 (H, W, 3). ``what`` names the source in errors; ``background``: RGB colour
    under transparent pixels."""
    if len(background) != 3 or not all(0 <= int(c) <= 255 for c in background):
        raise ValueError(f'background must be an RGB colour of three values in [0, 255], got {background!r}')
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED) if data else None
    if img is None or img.size == 0:
        raise ValueError(f'{what}: not a decodable image ({len(data or b"")} bytes; empty, truncated or not an '
                         f'image file)')
    return _orient(convert_array(img, what, background), _exif_orientation(data))


def read_image_file(path: str, background: Sequence[int] = WHITE) -> np.ndarray:
    """BGR uint8 (H, W, 3) from a file (see ``decode_image``); a missing or unreadable file names its path."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f'image file not found: {path}')
    with open(path, 'rb') as f:
        return decode_image(f.read(), path, background)


def list_image_files(folder: str, recursive: bool = False, skip_dir: str = '') -> List[str]:
    """Sorted paths, relative to ``folder``, of the files with an image extension (``IMAGE_EXTENSIONS``, any case)
    directly in ``folder``, or with ``recursive`` also in its subfolders (``skip_dir``, e.g. an output folder
    inside the input folder, is left out). A missing folder is a FileNotFoundError; an empty list is the caller's
    to judge."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f'image folder not found: {folder}')
    skip = os.path.realpath(skip_dir) if skip_dir else ''
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if os.path.realpath(os.path.join(root, d)) != skip) if recursive else []
        rel = os.path.relpath(root, folder)
        found.extend(n if rel == '.' else os.path.join(rel, n) for n in files if n.lower().endswith(IMAGE_EXTENSIONS))
    return sorted(found)
