"""Labelled text-line images from a FudanVI LMDB or from a folder + labels TSV, optionally
restricted by a DiffTSR index-list file; plus the resize to the 512x128 model canvas.

Every record has a ``key``: the LMDB image key (``image-000000001``) or the file path, which BasicSR
turns into the saved image's name (``osp.splitext(osp.basename(key))[0]``).
"""
import os
from typing import Optional, Sequence

import numpy as np
from PIL import Image

from tola_plugin.data.fudanvi_lmdb import FudanVILmdbReader, image_key
from tola_plugin.data.image_io import WHITE, convert_order, read_image_file
from tola_plugin.data.text_labels import read_index_list, read_labels_tsv

CANVAS_W, CANVAS_H = 512, 128


def canvas_rgb8(img: np.ndarray, width: int = CANVAS_W, height: int = CANVAS_H, order: str = 'BGR') -> np.ndarray:
    """uint8 (H, W, 3) in channel ``order`` (BGR: the datasets' reader, BasicSR's convention) -> RGB uint8
    (height,width,3).

    Resized with PIL bicubic on 8-bit RGB, as DiffTSR's dataset and inference do (PIL antialiases when
    shrinking, cv2 does not); images already at the canvas size are passed through unchanged.
    """
    rgb = convert_order(img, order, 'RGB')
    if rgb.shape[:2] != (height, width):
        rgb = np.asarray(Image.fromarray(rgb).resize((width, height), Image.BICUBIC))
    return rgb


def to_canvas(img: np.ndarray, width: int = CANVAS_W, height: int = CANVAS_H, order: str = 'BGR') -> np.ndarray:
    """uint8 (H, W, 3) in channel ``order`` -> RGB float32 (height,width,3) in [0,1] on the model canvas (see
    ``canvas_rgb8``)."""
    return canvas_rgb8(img, width, height, order).astype(np.float32) / 255.0


class LmdbLineSource:
    """Lines of a FudanVI LMDB; ``indices`` are 0-based (key = index + 1, as DiffTSR). ``background``: RGB colour
    under transparent pixels."""

    def __init__(self, path: str, index_list: Optional[str] = None, background: Sequence[int] = WHITE):
        self.path = path
        self.background = tuple(background)
        self.reader = FudanVILmdbReader(path)
        n = len(self.reader)
        self.indices = read_index_list(index_list, n) if index_list else list(range(n))
        # All labels up front so that label problems surface at construction.
        self.labels = [self.reader.read_label(i + 1) for i in self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def key(self, i: int) -> str:
        return image_key(self.indices[i] + 1).decode()

    def read(self, i: int) -> np.ndarray:
        """BGR uint8 image of record ``i``."""
        return self.reader.read_image(self.indices[i] + 1, self.background)


class FolderLineSource:
    """Images of ``folder`` named in a labels TSV (file order); ``index_list`` picks 0-based TSV rows;
    ``background``: RGB colour under transparent pixels."""

    def __init__(self, folder: str, labels_tsv: str, index_list: Optional[str] = None,
                 background: Sequence[int] = WHITE):
        if not os.path.isdir(folder):
            raise FileNotFoundError(f'image folder not found: {folder}')
        rows = read_labels_tsv(labels_tsv)
        if index_list:
            rows = [rows[i] for i in read_index_list(index_list, len(rows))]
        missing = [name for name, _ in rows if not os.path.isfile(os.path.join(folder, name))]
        if missing:
            raise FileNotFoundError(f'{len(missing)} file(s) named in {labels_tsv} are missing from {folder}, '
                                    f'first: {missing[:5]}')
        self.folder = folder
        self.background = tuple(background)
        self.names = [name for name, _ in rows]
        self.labels = [text for _, text in rows]

    def __len__(self) -> int:
        return len(self.names)

    def key(self, i: int) -> str:
        return os.path.join(self.folder, self.names[i])

    def read(self, i: int) -> np.ndarray:
        return read_image_file(self.key(i), self.background)


def background_option(opt: dict) -> tuple:
    """The dataset option ``background`` (RGB colour under transparent pixels, default white) as a tuple."""
    value = opt.get('background', WHITE)
    if (not isinstance(value, (list, tuple)) or len(value) != 3
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in value)):
        raise ValueError(f'dataset option background: expected an RGB colour [R, G, B] of integers in [0, 255], '
                         f'got {value!r}')
    return tuple(value)


def build_line_source(opt: dict, root_key: str) -> LmdbLineSource | FolderLineSource:
    """Line source for ``opt[root_key]`` per ``opt['io_backend']['type']`` ('lmdb' or 'disk')."""
    root = opt.get(root_key)
    if not root:
        raise KeyError(f'dataset option {root_key!r} is required')
    backend = opt.get('io_backend', {}).get('type', 'disk')
    if backend == 'lmdb':
        if opt.get('labels'):
            raise ValueError(f'io_backend lmdb reads labels from {root}; remove the "labels" option')
        return LmdbLineSource(root, opt.get('index_list'), background_option(opt))
    if backend == 'disk':
        if not opt.get('labels'):
            raise KeyError('io_backend disk needs the "labels" option (TSV: filename<TAB>transcription)')
        return FolderLineSource(root, opt['labels'], opt.get('index_list'), background_option(opt))
    raise ValueError(f'io_backend.type must be "lmdb" or "disk", got {backend!r}')
