#!/usr/bin/env python
"""Deterministic train/validation partition by index (paper: local 98%/2% split of 63,644 CTR HR lines
into 62,371 / 1,273).

Input: an LMDB (all ``num-samples`` entries), an existing index-list file, or a count. Output: two
index-list files of 0-based indices (DiffTSR convention; LMDB key = index + 1), each sorted ascending.
The validation size is round(N * val_fraction); which indices go to validation is fixed by --seed
(numpy PCG64 permutation) or, with --method stride, every k-th index.

Example:
    python tools/split_dataset.py --lmdb data/ctr/hr.lmdb --out-dir data/ctr/split
"""
import argparse
import os

import numpy as np

from tola_plugin.data.fudanvi_lmdb import FudanVILmdbReader
from tola_plugin.data.text_labels import read_index_list
from tola_plugin.utils.cli_errors import UsageError, run_tool


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument('--lmdb', help='FudanVI LMDB: split indices 0..num-samples-1')
    src.add_argument('--index-list', help='file of 0-based indices to split (e.g. a selection of an LMDB)')
    src.add_argument('--num', type=int, help='split indices 0..NUM-1')
    parser.add_argument('--out-dir', required=True, help='folder for train_index.txt and val_index.txt')
    parser.add_argument('--val-fraction', type=float, default=0.02, help='validation share [0.02]')
    parser.add_argument('--method', choices=['random', 'stride'], default='random',
                        help='random: seeded permutation [default]; stride: evenly spaced positions')
    parser.add_argument('--seed', type=int, default=0, help='permutation seed for --method random [0]')
    return parser.parse_args(argv)


def split_indices(indices, val_fraction=0.02, method='random', seed=0):
    """(train, val) lists of the given indices; deterministic for fixed arguments."""
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


def read_indices(path):
    values = read_index_list(path)
    if len(set(values)) != len(values):
        raise ValueError(f'{path} repeats indices')
    return values


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.lmdb:
        indices = list(range(len(FudanVILmdbReader(args.lmdb))))
    elif args.index_list:
        indices = read_indices(args.index_list)
    else:
        if args.num < 2:
            raise UsageError('--num must be at least 2')
        indices = list(range(args.num))
    train, val = split_indices(indices, args.val_fraction, args.method, args.seed)
    os.makedirs(args.out_dir, exist_ok=True)
    for name, values in (('train_index.txt', train), ('val_index.txt', val)):
        with open(os.path.join(args.out_dir, name), 'w', encoding='utf-8') as f:
            f.writelines(f'{v}\n' for v in values)
    print(f'{len(indices)} indices -> {len(train)} train, {len(val)} val in {args.out_dir}')
    return 0


if __name__ == '__main__':
    run_tool(main)
