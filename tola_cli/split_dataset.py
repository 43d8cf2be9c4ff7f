"""Deterministic train/validation partition by index (paper: local 98%/2% split of 63,644 CTR HR lines
into 62,371 / 1,273).

Input: an LMDB (all ``num-samples`` entries), an existing index-list file, or a count. Output: two
index-list files of 0-based indices (DiffTSR convention; LMDB key = index + 1), each sorted ascending.
The validation size is round(N * val_fraction); which indices go to validation is fixed by --seed
(numpy PCG64 permutation) or, with --method stride, every k-th index.

Example:
    tola-split-dataset --lmdb data/ctr/hr.lmdb --out-dir data/ctr/split
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog='tola-split-dataset', description=__doc__.split('\n\n')[0])
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


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.data_preparation.dataset_split import write_split
    return write_split(args.out_dir, args.lmdb, args.index_list, args.num, args.val_fraction, args.method, args.seed)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
