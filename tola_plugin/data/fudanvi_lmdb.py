"""FudanVI-format text-line LMDB: keys ``image-%09d`` (encoded PNG/JPEG), ``label-%09d`` (UTF-8),
``num-samples``; indices are 1-based. Written by lmdb directly: basicsr's LmdbMaker uses other keys.
``write_lmdb_from_folder`` turns a folder of line images and its labels TSV into one (tools/make_lmdb.py).
"""
import os
import shutil
import sys
from typing import Iterable, Iterator, Sequence, Tuple

import lmdb
import numpy as np

from tola_plugin.data.image_io import WHITE, decode_image
from tola_plugin.data.text_labels import TOOL_SKIP_HINT, read_labels_tsv_lines, usable_positions
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.lmdb_check import check_lmdb
from tola_plugin.utils.user_text import say


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


def iter_image_files(images: str, rows: Sequence[Tuple[str, str]]) -> Iterator[Tuple[bytes, str]]:
    """(file bytes, label) of each (file name, label) of ``rows``, files in ``images``, in order; every file is
    decoded once to check it. FileNotFoundError / ValueError name the file."""
    for name, text in rows:
        path = os.path.join(images, name)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'{path}: listed in the labels but missing')
        with open(path, 'rb') as f:
            data = f.read()
        decode_image(data, path)  # refuse corrupt files now rather than at training time
        yield data, text


def write_lmdb_from_folder(images: str, labels: str, out: str, map_size: int = 1 << 34,
                           skip_invalid_labels: bool = False) -> int:
    """Folder ``images`` + labels TSV ``labels`` (filename<TAB>transcription) -> a new LMDB ``out``, samples in TSV
    order with their original encoded bytes, and ``out``/filenames.tsv mapping every key index to its file. A failed
    write leaves no LMDB behind. Every label is checked first (text_labels, the rule of every tool and dataset): an
    invalid one is an error naming its line, or with ``skip_invalid_labels`` is left out with a warning. Prints one
    line; -> 0. UsageError when ``images`` is not a folder or ``out`` already holds an LMDB."""
    if not os.path.isdir(images):
        raise UsageError(f'--images {images} is not a folder')
    numbered = read_labels_tsv_lines(labels)
    keep = usable_positions([text for _, _, text in numbered],
                            lambda i: f'{labels}:{numbered[i][0]} ({numbered[i][1]})', 'lower', skip_invalid_labels,
                            labels, lambda message: say(f'warning: {message}'), TOOL_SKIP_HINT)
    rows = [numbered[i][1:] for i in keep]
    if os.path.exists(os.path.join(out, 'data.mdb')):
        raise UsageError(f'{out} already holds an LMDB; remove it or choose another --out')
    created = not os.path.exists(out)
    try:
        count = write_fudanvi_lmdb(out, iter_image_files(images, rows), map_size=map_size)
    except BaseException:
        # The aborted transaction leaves an empty data.mdb behind, which would make the rerun refuse --out.
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for name in ('data.mdb', 'lock.mdb'):
                if os.path.exists(os.path.join(out, name)):
                    os.remove(os.path.join(out, name))
        raise
    with open(os.path.join(out, 'filenames.tsv'), 'w', encoding='utf-8') as f:
        f.write('index\tfilename\n')
        for i, (name, _) in enumerate(rows, start=1):
            f.write(f'{i}\t{name}\n')
    say(f'wrote {count} samples to {out}', sys.stdout)
    return 0


_ENVS = {}


def shared_lmdb_env(path: str):
    """One read-only, lock-free environment per LMDB folder, shared by every reader of the process.

    py-lmdb refuses to open a folder twice in a process (e.g. train and validation sets on one LMDB
    with different index lists); forked DataLoader workers inherit the environment and read through it,
    as basicsr's LmdbBackend does.
    """
    key = os.path.realpath(path)
    if key not in _ENVS:
        check_lmdb(path)  # a truncated data.mdb is an error here, not a SIGBUS at the first read
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
        text = raw.decode('utf-8', 'replace').strip()
        if not (text.isascii() and text.isdigit()):
            raise ValueError(f'{path}: num-samples is {text!r}; expected the number of samples, a whole number >= 0 '
                             f'(FudanVI format: keys image-%09d and label-%09d from 1 to num-samples)')
        self.num_samples = int(text)

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
