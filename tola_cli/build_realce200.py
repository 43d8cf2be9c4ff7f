"""Build RealCE-200 (paper supp. "RealCE-200 Construction") from the RealCE validation split.

For every official text annotation (``<root>/<split>/annos/<stem>.txt``, GBK, lines
``x1,y1,...,x4,y4,transcription``) the axis-aligned box of the quadrilateral is cut from the 13 mm
(LR) and the 52 mm (reference) image with identical coordinates and both crops are resized
(PIL bicubic) to 512x128 without registration. Candidates are filtered on transcription length and
composition, box size, aspect ratio, sharpness and contrast, de-duplicated by transcription identity
and dHash, and --count of the survivors are drawn with --seed; IDs R001.. follow source order.

The paper names the filter categories but not their values: the defaults below are this tool's
choices (documented in docs/data.md); contrast reuses RT50's lower gray-std bound and the dHash
distance RT50's threshold.

Outputs in --out: lr/Rxxx.png, hr/Rxxx.png, labels.tsv (for PairedTextDataset), manifest.tsv
(ID, sources, box, transcription, statistics, SHA-256 of both files) and candidates.tsv (every
annotation with its decision).

Example:
    tola-build-realce200 --root data/Real-CE --out data/RealCE-200
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog='tola-build-realce200', description=__doc__.split('\n\n')[0])
    p.add_argument('--root', required=True, help='RealCE root holding <split>/{13mm,52mm,annos}')
    p.add_argument('--out', required=True, help='output folder (must be empty or absent)')
    p.add_argument('--split', default='val', help='RealCE split folder [val]')
    p.add_argument('--lr-focal', default='13mm', help='LR focal folder [13mm]')
    p.add_argument('--ref-focal', default='52mm', help='reference focal folder [52mm]')
    p.add_argument('--anno-encoding', default='gbk', help='annotation file encoding [gbk, as RealCE val]')
    p.add_argument('--count', type=int, default=200, help='pairs to keep [200]')
    p.add_argument('--seed', type=int, default=0, help='seed of the draw among surviving candidates [0]')
    p.add_argument('--min-chars', type=int, default=2, help='transcription length lower bound [2]')
    p.add_argument('--max-chars', type=int, default=24, help='upper bound [24 = IDM/TransOCR target room]')
    p.add_argument('--min-box-width', type=int, default=32, help='box width lower bound, pixels [32]')
    p.add_argument('--min-box-height', type=int, default=16, help='box height lower bound, pixels [16]')
    p.add_argument('--aspect', type=float, nargs=2, default=[1.0, 8.0], metavar=('LO', 'HI'),
                   help='box width/height range, inclusive [1 8: DiffTSR input rule]')
    p.add_argument('--min-ref-sharpness', type=float, default=20.0,
                   help='reference crop Laplacian variance lower bound on the 512x128 gray canvas [20]')
    p.add_argument('--min-contrast', type=float, default=10.0,
                   help='gray std lower bound of both crops on the canvas [10, RT50\'s bound]')
    p.add_argument('--dhash-distance', type=int, default=7,
                   help='reference crops within this dHash Hamming distance of a kept one are duplicates [7]')
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.data_preparation.realce200 import build_realce200
    return build_realce200(args.root, args.out, args.split, args.lr_focal, args.ref_focal, args.anno_encoding,
                           args.count, args.seed, args.min_chars, args.max_chars, args.min_box_width,
                           args.min_box_height, args.aspect, args.min_ref_sharpness, args.min_contrast,
                           args.dhash_distance)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
