"""Held-out HR text lines -> a fixed degraded test set in CTR-TSR-Test's layout: hr/, lr_x<s>/, labels.tsv.

Each line goes through TOLA's training degradation (``TextDegradationDataset``: Real-ESRGAN or BSRGAN at x<s>, fixed
``--seed``), so the test pairs are of the kind every method was trained on. ``hr/`` holds the 512x128 canvases (the
references of tola-evaluate), ``lr_x<s>/`` the LR lines at 512/s x 128/s, both PNG, named after the LMDB key
(``image-000000012.png``) or the image file; ``sources.tsv`` maps each name back to its LMDB index and original file.
The test option files (options/test/, options/baselines/) read them as they read CTR-TSR-Test (docs/own_data.md).
Labels follow the rule of every tool (docs/data.md, "Labels").

Example:
    tola-make-test-set --lmdb datasets/own/lines.lmdb --index-list datasets/own/holdout/val_index.txt \
        --out datasets/own/test
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog='tola-make-test-set', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument('--lmdb', help='FudanVI LMDB of HR lines (tola-make-lmdb)')
    src.add_argument('--images', help='folder of HR lines named in --labels')
    p.add_argument('--labels', help='with --images: TSV filename<TAB>transcription')
    p.add_argument('--index-list', help='0-based indices of the lines to use (tola-split-dataset); default: all')
    p.add_argument('--out', required=True, help='new folder for hr/, lr_x<s>/ and labels.tsv')
    p.add_argument('--scale', type=int, default=4, choices=(2, 4), help='LR scale [4]')
    p.add_argument('--seed', type=int, default=1, help='degradation seed [1] (the validation seed of the option files)')
    p.add_argument('--skip-invalid-labels', action='store_true',
                   help='leave out (and report) the lines whose labels are invalid, instead of stopping')
    args = p.parse_args(argv)
    if args.images and not args.labels:
        p.error('--images needs --labels')
    if args.lmdb and args.labels:
        p.error('--labels is for --images (an LMDB holds its labels)')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.data_preparation.degraded_test_set import write_test_set
    return write_test_set(args.out, args.lmdb, args.images, args.labels, args.index_list, args.scale, args.seed,
                          args.skip_invalid_labels)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
