"""Render single-line text images on a 128x512 canvas, with their transcriptions.

Writes (a) a folder of PNGs plus a labels TSV (``filename<TAB>transcription``, default ``OUT/labels.tsv``) and/or (b) a
FudanVI-format LMDB. Optionally also a bicubic-downsampled LR folder with the same file names, for
paired baselines. Same seed, same bytes.

Example:
    tola-render-text --num 200 --seed 0 --out demo_data/train
    tola-render-text --num 200 --seed 0 --out data/hr --labels data/labels.tsv --lq-out data/lr_x4
    tola-render-text --num 1000 --seed 1 --lmdb datasets/rendered.lmdb
"""
import argparse

from tola_cli.command import run_command
from tola_cli.defaults import TEXT_CATEGORIES, TEXT_CATEGORY_PROBS


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog='tola-render-text', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--num', type=int, required=True, help='number of lines to render')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', help='output folder for PNGs + labels.tsv')
    p.add_argument('--labels', help='labels TSV path (default: OUT/labels.tsv)')
    p.add_argument('--lmdb', help='output FudanVI LMDB folder (must not exist yet)')
    p.add_argument('--lq-out', help='also write bicubic-downsampled LR PNGs (same names) here')
    p.add_argument('--lq-scale', type=int, default=4, help='downsampling factor for --lq-out (default 4)')
    p.add_argument('--font', action='append', help='font file (repeatable); default: fontconfig Chinese fonts')
    p.add_argument('--texts', help='UTF-8 file with one transcription per line, used in order instead of random text')
    p.add_argument('--category-probs', type=float, nargs=len(TEXT_CATEGORIES), default=list(TEXT_CATEGORY_PROBS),
                   metavar='P', help=f'probabilities of {", ".join(TEXT_CATEGORIES)}')
    p.add_argument(
        '--chinese-chars', metavar='POOL',
        help="Chinese characters to draw from: 'common' (default, GB2312 level 1 in both alphabets), "
        "'demo' (the demo's 100 frequent characters) or a UTF-8 file of characters")
    p.add_argument('--height', type=int, default=128)
    p.add_argument('--width', type=int, default=512)
    p.add_argument('--format', choices=('png', 'jpg'), default='png', help='image encoding inside the LMDB')
    args = p.parse_args(argv)
    if not args.out and not args.lmdb:
        p.error('give --out and/or --lmdb')
    if args.lq_out and not args.out:
        p.error('--lq-out needs --out')
    if args.num <= 0:
        p.error('--num must be positive')
    return args


def main(argv=None):
    args = parse_args(argv)
    from tola_plugin.commands.data_preparation.rendered_lines import write_rendered_lines
    return write_rendered_lines(args.num, args.seed, args.out, args.labels, args.lmdb, args.lq_out, args.lq_scale,
                                args.font, args.texts, args.category_probs, args.chinese_chars, args.height, args.width,
                                args.format)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
