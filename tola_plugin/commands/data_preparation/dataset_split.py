"""Deterministic train/validation partition by index (tools/split_dataset.py; paper: local 98%/2% split of 63,644
CTR HR lines into 62,371 / 1,273).

Indices are 0-based (DiffTSR convention; LMDB key = index + 1). The validation size is round(N * val_fraction);
which indices go to validation is fixed by the seed (numpy PCG64 permutation) or, with method 'stride', evenly
spaced positions.
"""
import os
import sys
from typing import List, Optional, Sequence, Tuple

import numpy as np

from tola_plugin.data.fudanvi_lmdb import FudanVILmdbReader
from tola_plugin.data.text_labels import read_index_list
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.user_text import say


def split_indices(indices: Sequence[int], val_fraction: float = 0.02, method: str = 'random',
                  seed: int = 0) -> Tuple[List[int], List[int]]:
    """(train, val) lists of the given indices, each sorted ascending; deterministic for fixed arguments.
    ValueError for a fraction outside (0, 1), an empty split or an unknown method."""
    n = len(indices)
    if not 0 < val_fraction < 1:
        raise ValueError(f'val_fraction must be in (0, 1), got {val_fraction}')
    n_val = int(round(n * val_fraction))
    if n_val < 1 or n_val >= n:
        raise ValueError(f'{n} samples with val_fraction {val_fraction} leave an empty split')
    if method == 'random':
        val_pos = np.random.Generator(np.random.PCG64(seed)).permutation(n)[:n_val]
    elif method == 'stride':
        val_pos = np.floor(np.arange(n_val) * (n / n_val)).astype(np.int64)
    else:
        raise ValueError(f'unknown method {method!r}')
    is_val = np.zeros(n, bool)
    is_val[val_pos] = True
    arr = np.asarray(indices)
    return sorted(arr[~is_val].tolist()), sorted(arr[is_val].tolist())


def read_indices(path: str) -> List[int]:
    """The 0-based indices of an index-list file; ValueError when one repeats."""
    values = read_index_list(path)
    if len(set(values)) != len(values):
        raise ValueError(f'{path} repeats indices')
    return values


def write_split(out_dir: str, lmdb: Optional[str] = None, index_list: Optional[str] = None, num: Optional[int] = None,
                val_fraction: float = 0.02, method: str = 'random', seed: int = 0) -> int:
    """Split the indices of one source (every sample of the LMDB ``lmdb``, the index-list file ``index_list``, or
    0..``num``-1) and write ``out_dir``/train_index.txt and val_index.txt (one index a line). Prints one line;
    -> 0. UsageError when ``num`` < 2."""
    if lmdb:
        indices = list(range(len(FudanVILmdbReader(lmdb))))
    elif index_list:
        indices = read_indices(index_list)
    else:
        if num < 2:
            raise UsageError('--num must be at least 2')
        indices = list(range(num))
    train, val = split_indices(indices, val_fraction, method, seed)
    os.makedirs(out_dir, exist_ok=True)
    for name, values in (('train_index.txt', train), ('val_index.txt', val)):
        with open(os.path.join(out_dir, name), 'w', encoding='utf-8') as f:
            f.writelines(f'{v}\n' for v in values)
    say(f'{len(indices)} indices -> {len(train)} train, {len(val)} val in {out_dir}', sys.stdout)
    return 0
