r"""Evaluate restored text images with the paper's protocol (Table 1 / Table 2 metrics).

Example (two methods side by side, all nine metrics):
    tola-evaluate --reference data/CTR-TSR-Test/HR --labels data/CTR-TSR-Test/labels.tsv \
        --method TOLA=results/TOLA --method DiffTSR=results/DiffTSR \
        --transocr-checkpoint checkpoints/transocr.pth --out results/eval

The LR input itself as a row (bicubic): --method Bicubic=data/CTR-TSR-Test/lr_x4 --upscale (every method whose
images are smaller than the references by a whole factor is resized to them, PIL bicubic as TOLA's input; the
summary records which, under protocol.upscaled).

Writes <out>/per_image/<method>.csv, <out>/summary.json and <out>/summary.md (atomically). An image over the
image budget (--max-megapixels, read from its header before decoding) or one that cannot be decoded is an error
naming it. See docs/evaluation.md.
"""
import argparse
import math
import os

from tola_cli.arguments import rgb_triple, shown
from tola_cli.command import run_command
from tola_cli.defaults import ALL_METRICS, COLOR_SPACE, LUMA_COLOR_SPACES, MAX_PIXELS, WHITE


def parse_method(spec: str):
    """'NAME=FOLDER' or 'FOLDER' (name = folder basename)."""
    if '=' in spec:
        name, folder = spec.split('=', 1)
    else:
        folder = spec
        name = os.path.basename(os.path.normpath(spec))
    if not name or not folder:
        raise argparse.ArgumentTypeError(f'--method expects NAME=FOLDER, got {spec!r}')
    return name, folder


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='tola-evaluate', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--method', action='append', type=parse_method, required=True, metavar='NAME=FOLDER',
                   help='restored images of one method; repeat for several methods (one table)')
    p.add_argument('--reference', help='reference (HR) folder; needed for PSNR/SSIM/LPIPS/DISTS/FID')
    p.add_argument('--labels', help='labels manifest, TSV filename<TAB>transcription; needed for ACC/NED')
    p.add_argument('--out', required=True, help='output folder')
    p.add_argument(
        '--upscale', action='store_true',
        help='resize the images of a method that are smaller than the references by a whole factor (an LR '
        'folder: the bicubic row) to the references\' size, PIL bicubic; without it a size mismatch is an error')
    p.add_argument(
        '--metrics', help=f'comma-separated subset of {",".join(ALL_METRICS)} (default: every '
        'metric the inputs allow; those whose weight files are absent are skipped '
        'with a message)')
    p.add_argument(
        '--transocr-checkpoint', help="official transocr.pth (TransOCR ACC/NED), or demo: the demo backbone's "
        'TransOCR (it reads lower case: add --lower)')
    p.add_argument('--transocr-preprocess', default='difftsr', choices=('difftsr', 'benchmark'),
                   help='TransOCR input pipeline (default difftsr: the one that produces the text prior)')
    p.add_argument(
        '--lower', action='store_true',
        help="lower-case every text before matching (CTR benchmark variant; the paper preserves case "
        "for TransOCR)")
    p.add_argument(
        '--ppocr-case-sensitive', action='store_true',
        help='keep case when matching PP-OCRv4 texts (default: lower-cased, since PP-OCRv4 reads upper '
        'case that TransOCR and the CTR labels do not have)')
    p.add_argument('--color-space', default=COLOR_SPACE, choices=LUMA_COLOR_SPACES,
                   help='luminance for PSNR/SSIM (default ycbcr: BT.601 Y as BasicSR/MATLAB)')
    p.add_argument('--background', type=rgb_triple, default=WHITE, metavar='R,G,B',
                   help='colour under transparent pixels of RGBA/LA/palette images (default 255,255,255 = white)')
    p.add_argument(
        '--max-megapixels', type=float, default=MAX_PIXELS / 1e6,
        help=f'image budget: larger images are refused from their header, before decoding '
        f'({MAX_PIXELS / 1e6:g} million pixels)')
    p.add_argument('--device', default='cpu', help='torch device, e.g. cpu or cuda:0')
    p.add_argument('--batch-size', type=int, default=8)
    p.add_argument('--num-workers', type=int, default=0, help='data-loader workers of FID')
    p.add_argument('--no-progress', action='store_true', help='hide the progress bars')
    return p


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if len(dict(args.method)) != len(args.method):
        parser.error('two --method entries have the same name')
    if not (math.isfinite(args.max_megapixels) and args.max_megapixels > 0):
        parser.error(f'--max-megapixels must be a finite number > 0, got {shown(args.max_megapixels)}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.evaluation.runner import evaluate_methods
    metrics = [m.strip() for m in args.metrics.split(',') if m.strip()] if args.metrics else None
    evaluate_methods(
        dict(args.method), args.out, reference_dir=args.reference, labels_path=args.labels, metrics=metrics,
        device=args.device, color_space=args.color_space, lower=args.lower,
        transocr_checkpoint=args.transocr_checkpoint, transocr_preprocess=args.transocr_preprocess,
        batch_size=args.batch_size, num_workers=args.num_workers, progress=not args.no_progress,
        ppocr_lower=not args.ppocr_case_sensitive, background=args.background,
        max_pixels=round(args.max_megapixels * 1e6), upscale=args.upscale)
    with open(os.path.join(args.out, 'summary.md'), encoding='utf-8') as f:
        print(f.read(), end='')
    return 0


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
