#!/usr/bin/env python
"""Folder of text-line images + labels TSV -> FudanVI-format LMDB (image-%09d, label-%09d, num-samples).

Samples are written in TSV order (1-based keys); the original encoded bytes are stored unchanged after
checking that each decodes. ``filenames.tsv`` in the output folder maps every key index to its file.

Example:
    python tools/make_lmdb.py --images data/ctr/hr --labels data/ctr/labels.tsv --out data/ctr/hr.lmdb
"""
import argparse

from tola_plugin.data.fudanvi_lmdb import write_lmdb_from_folder
from tola_plugin.utils.cli_errors import run_tool


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', required=True, help='folder holding the images named in --labels')
    parser.add_argument('--labels', required=True, help='TSV: filename<TAB>transcription (UTF-8)')
    parser.add_argument('--out', required=True, help='new LMDB folder (must not hold an LMDB yet)')
    parser.add_argument('--map-size', type=int, default=1 << 34, help='LMDB map size in bytes [16 GiB]')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return write_lmdb_from_folder(args.images, args.labels, args.out, args.map_size)


if __name__ == '__main__':
    run_tool(main)
