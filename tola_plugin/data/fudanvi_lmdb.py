"""FudanVI-format text-line LMDB: keys ``image-%09d`` (encoded PNG/JPEG), ``label-%09d`` (UTF-8),
``num-samples``; indices are 1-based. Written by lmdb directly: basicsr's LmdbMaker uses other keys.
"""
import os
from typing import Iterable, Sequence, Tuple

import lmdb
import numpy as np

from tola_plugin.data.image_io import WHITE, decode_image


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


_ENVS = {}


def shared_lmdb_env(path: str):
    """One read-only, lock-free environment per LMDB folder, shared by every reader of the process.

    py-lmdb refuses to open a folder twice in a process (e.g. train and validation sets on one LMDB
    with different index lists); forked DataLoader workers inherit the environment and read through it,
    as basicsr's LmdbBackend does.
    """
    key = os.path.realpath(path)
    if key not in _ENVS:
        if not os.path.isfile(os.path.join(path, 'data.mdb')):
            raise FileNotFoundError(f'{path} is not an LMDB folder (no data.mdb)')
        _ENVS[key] = lmdb.open(path, readonly=True, lock=False, readahead=False, meminit=False)
    return _ENVS[key]


class FudanVILmdbReader:
    """Read-only access to a FudanVI LMDB by 1-based index."""

    def __init__(self, path: str):
        self.path = path
        with shared_lmdb_env(path).begin() as txn:
            raw = txn.get(b'num-samples')
        if raw is None:
            raise KeyError(f'{path}: LMDB has no num-samples key; expected the FudanVI format')
        self.num_samples = int(raw)

    def __len__(self) -> int:
        return self.num_samples

    def _get(self, key: bytes) -> bytes:
        with shared_lmdb_env(self.path).begin() as txn:
            value = txn.get(key)
        if value is None:
            raise KeyError(f'{self.path}: missing key {key.decode()}')
        return value

    def read_label(self, index: int) -> str:
        """Label of the 1-based ``index``-th sample (UTF-8; anything else is a ValueError naming the key)."""
        raw = self._get(label_key(index))
        try:
            return raw.decode('utf-8')
        except UnicodeDecodeError as err:
            raise ValueError(f'{self.path}: {label_key(index).decode()} is not UTF-8 text ({err.reason} at byte '
                             f'{err.start}); FudanVI LMDB labels are UTF-8') from None

    def read_image(self, index: int, background: Sequence[int] = WHITE) -> np.ndarray:
        """BGR uint8 image (H,W,3) of the 1-based ``index``-th sample; transparency over ``background`` (RGB)."""
        return decode_image(self._get(image_key(index)), f'{self.path}: {image_key(index).decode()}', background)

    def read_raw(self, index: int) -> Tuple[bytes, str]:
        """Encoded image bytes and label of the 1-based ``index``-th sample."""
        return self._get(image_key(index)), self.read_label(index)

    def read(self, index: int) -> Tuple[np.ndarray, str]:
        """BGR uint8 image (H,W,3) and label of the 1-based ``index``-th sample."""
        return self.read_image(index), self.read_label(index)
