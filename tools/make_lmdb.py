#!/usr/bin/env python
"""Folder of text-line images + labels TSV -> FudanVI-format LMDB (image-%09d, label-%09d, num-samples).

Samples are written in TSV order (1-based keys); the original encoded bytes are stored unchanged after
checking that each decodes. ``filenames.tsv`` in the output folder maps every key index to its file.

Example:
    python tools/make_lmdb.py --images data/ctr/hr --labels data/ctr/labels.tsv --out data/ctr/hr.lmdb
"""
import argparse
import os
import shutil

from tola_plugin.data.fudanvi_lmdb import write_fudanvi_lmdb
from tola_plugin.data.image_io import decode_image
from tola_plugin.data.text_labels import read_labels_tsv
from tola_plugin.utils.cli_errors import UsageError, run_tool


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', required=True, help='folder holding the images named in --labels')
    parser.add_argument('--labels', required=True, help='TSV: filename<TAB>transcription (UTF-8)')
    parser.add_argument('--out', required=True, help='new LMDB folder (must not hold an LMDB yet)')
    parser.add_argument('--map-size', type=int, default=1 << 34, help='LMDB map size in bytes [16 GiB]')
    return parser.parse_args(argv)


def iter_samples(images: str, rows):
    for name, text in rows:
        path = os.path.join(images, name)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'{path}: listed in the labels but missing')
        with open(path, 'rb') as f:
            data = f.read()
        decode_image(data, path)  # refuse corrupt files now rather than at training time
        yield data, text


def main(argv=None) -> int:
    args = parse_args(argv)
    if not os.path.isdir(args.images):
        raise UsageError(f'--images {args.images} is not a folder')
    rows = read_labels_tsv(args.labels)
    if os.path.exists(os.path.join(args.out, 'data.mdb')):
        raise UsageError(f'{args.out} already holds an LMDB; remove it or choose another --out')
    created = not os.path.exists(args.out)
    try:
        count = write_fudanvi_lmdb(args.out, iter_samples(args.images, rows), map_size=args.map_size)
    except BaseException:
        # The aborted transaction leaves an empty data.mdb behind, which would make the rerun refuse --out.
        if created:
            shutil.rmtree(args.out, ignore_errors=True)
        else:
            for name in ('data.mdb', 'lock.mdb'):
                if os.path.exists(os.path.join(args.out, name)):
                    os.remove(os.path.join(args.out, name))
        raise
    with open(os.path.join(args.out, 'filenames.tsv'), 'w', encoding='utf-8') as f:
        f.write('index\tfilename\n')
        for i, (name, _) in enumerate(rows, start=1):
            f.write(f'{i}\t{name}\n')
    print(f'wrote {count} samples to {args.out}')
    return 0


if __name__ == '__main__':
    run_tool(main)
