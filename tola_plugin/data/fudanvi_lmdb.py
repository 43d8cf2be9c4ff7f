"""FudanVI-format text-line LMDB: keys ``image-%09d`` (encoded PNG/JPEG), ``label-%09d`` (UTF-8),
``num-samples``; indices are 1-based. Written by lmdb directly: basicsr's LmdbMaker uses other keys.
"""
import os
from typing import Iterable, Tuple

import cv2
import lmdb
import numpy as np


def image_key(index: int) -> bytes:
    """Key of the 1-based ``index``-th image."""
    return b'image-%09d' % index


def label_key(index: int) -> bytes:
    """Key of the 1-based ``index``-th label."""
    return b'label-%09d' % index


def write_fudanvi_lmdb(path: str, samples: Iterable[Tuple[bytes, str]], map_size: int = 1 << 34) -> int:
    """Write (encoded image bytes, label) pairs to a new LMDB at ``path``; returns the sample count.

    Refuses to overwrite an existing LMDB so that nothing is lost.
    """
    if os.path.exists(os.path.join(path, 'data.mdb')):
        raise FileExistsError(f'{path} already holds an LMDB; remove it or choose another path')
    os.makedirs(path, exist_ok=True)
    env = lmdb.open(path, map_size=map_size)
    count = 0
    with env.begin(write=True) as txn:
        for count, (img_bytes, label) in enumerate(samples, start=1):
            if not label:
                raise ValueError(f'{path}: sample {count} has an empty label')
            txn.put(image_key(count), img_bytes)
            txn.put(label_key(count), label.encode('utf-8'))
        txn.put(b'num-samples', str(count).encode())
    env.close()
    return count


class FudanVILmdbReader:
    """Read-only access to a FudanVI LMDB; opened lazily so it survives DataLoader worker forks."""

    def __init__(self, path: str):
        if not os.path.isfile(os.path.join(path, 'data.mdb')):
            raise FileNotFoundError(f'{path} is not an LMDB folder (no data.mdb)')
        self.path = path
        self._env = None
        with self._open().begin() as txn:
            raw = txn.get(b'num-samples')
        if raw is None:
            raise KeyError(f'{path}: LMDB has no num-samples key; expected FudanVI format')
        self.num_samples = int(raw)
        self._env.close()
        self._env = None

    def _open(self):
        if self._env is None:
            self._env = lmdb.open(self.path, readonly=True, lock=False, readahead=False, meminit=False)
        return self._env

    def __len__(self) -> int:
        return self.num_samples

    def read_raw(self, index: int) -> Tuple[bytes, str]:
        """Encoded image bytes and label of the 1-based ``index``-th sample."""
        with self._open().begin() as txn:
            img = txn.get(image_key(index))
            label = txn.get(label_key(index))
        if img is None or label is None:
            missing = image_key(index) if img is None else label_key(index)
            raise KeyError(f'{self.path}: missing key {missing.decode()}')
        return img, label.decode('utf-8')

    def read(self, index: int) -> Tuple[np.ndarray, str]:
        """BGR uint8 image (H,W,3) and label of the 1-based ``index``-th sample."""
        img_bytes, label = self.read_raw(index)
        img = cv2.imdecode(np.frombuffer(img_bytes, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f'{self.path}: {image_key(index).decode()} is not a decodable image')
        return img, label
