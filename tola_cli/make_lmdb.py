"""Folder of text-line images + labels TSV -> FudanVI-format LMDB (image-%09d, label-%09d, num-samples).

Samples are written in TSV order (1-based keys); the original encoded bytes are stored unchanged after
checking that each decodes. ``filenames.tsv`` in the output folder maps every key index to its file. Every label
is checked first with the rule of every tool and dataset (docs/data.md, "Labels": whitespace is removed for the
recognizers; a label must be non-empty, at most 24 characters, in the TransOCR alphabet): an invalid one is an error
naming its line, or with --skip-invalid-labels is left out with a warning.

Example:
    tola-make-lmdb --images data/ctr/hr --labels data/ctr/labels.tsv --out data/ctr/hr.lmdb
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog='tola-make-lmdb', description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', required=True, help='folder holding the images named in --labels')
    parser.add_argument('--labels', required=True, help='TSV: filename<TAB>transcription (UTF-8)')
    parser.add_argument('--out', required=True, help='new LMDB folder (must not hold an LMDB yet)')
    parser.add_argument('--map-size', type=int, default=1 << 34, help='LMDB map size in bytes [16 GiB]')
    parser.add_argument('--skip-invalid-labels', action='store_true',
                        help='leave out (and report) the lines whose labels are invalid, instead of stopping')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.data.fudanvi_lmdb import write_lmdb_from_folder
    return write_lmdb_from_folder(args.images, args.labels, args.out, args.map_size, args.skip_invalid_labels)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
