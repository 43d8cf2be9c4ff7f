r"""Evaluate restored text images with the paper's protocol (Table 1 / Table 2 metrics).

Example (two methods side by side, all nine metrics):
    python tools/evaluate.py --reference data/CTR-TSR-Test/HR --labels data/CTR-TSR-Test/labels.tsv \
        --method TOLA=results/TOLA --method DiffTSR=results/DiffTSR \
        --transocr-checkpoint checkpoints/transocr.pth --out results/eval

Writes <out>/per_image/<method>.csv, <out>/summary.json and <out>/summary.md (atomically). An image over the
image budget (--max-megapixels, read from its header before decoding) or one that cannot be decoded is an error
naming it. See docs/evaluation.md.
"""
import argparse
import math
import os

from tola_cli.arguments import rgb_triple
from tola_plugin.data.image_io import DEFAULT_MAX_PIXELS, WHITE
from tola_plugin.evaluation.runner import ALL_METRICS, evaluate_methods
from tola_plugin.metrics.image_metrics import DEFAULT_COLOR_SPACE, LUMA_COLOR_SPACES
from tola_plugin.utils.cli_errors import UsageError, run_tool


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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--method', action='append', type=parse_method, required=True, metavar='NAME=FOLDER',
                   help='restored images of one method; repeat for several methods (one table)')
    p.add_argument('--reference', help='reference (HR) folder; needed for PSNR/SSIM/LPIPS/DISTS/FID')
    p.add_argument('--labels', help='labels manifest, TSV filename<TAB>transcription; needed for ACC/NED')
    p.add_argument('--out', required=True, help='output folder')
    p.add_argument(
        '--metrics', help=f'comma-separated subset of {",".join(ALL_METRICS)} (default: every '
        'metric the inputs allow; those whose weight files are absent are skipped '
        'with a message)')
    p.add_argument('--transocr-checkpoint', help='official transocr.pth (TransOCR ACC/NED)')
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
    p.add_argument('--color-space', default=DEFAULT_COLOR_SPACE, choices=LUMA_COLOR_SPACES,
                   help='luminance for PSNR/SSIM (default ycbcr: BT.601 Y as BasicSR/MATLAB)')
    p.add_argument('--background', type=rgb_triple, default=WHITE, metavar='R,G,B',
                   help='colour under transparent pixels of RGBA/LA/palette images (default 255,255,255 = white)')
    p.add_argument(
        '--max-megapixels', type=float, default=DEFAULT_MAX_PIXELS / 1e6,
        help=f'image budget: larger images are refused from their header, before decoding '
        f'({DEFAULT_MAX_PIXELS / 1e6:g} million pixels)')
    p.add_argument('--device', default='cpu', help='torch device, e.g. cpu or cuda:0')
    p.add_argument('--batch-size', type=int, default=8)
    p.add_argument('--num-workers', type=int, default=0, help='data-loader workers of FID')
    p.add_argument('--no-progress', action='store_true', help='hide the progress bars')
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    methods = dict(args.method)
    if len(methods) != len(args.method):
        raise UsageError('two --method entries have the same name')
    metrics = [m.strip() for m in args.metrics.split(',') if m.strip()] if args.metrics else None
    if not (math.isfinite(args.max_megapixels) and args.max_megapixels > 0):
        raise UsageError(f'--max-megapixels must be a finite number > 0, got {args.max_megapixels}')
    evaluate_methods(methods, args.out, reference_dir=args.reference, labels_path=args.labels, metrics=metrics,
                     device=args.device, color_space=args.color_space, lower=args.lower,
                     transocr_checkpoint=args.transocr_checkpoint, transocr_preprocess=args.transocr_preprocess,
                     batch_size=args.batch_size, num_workers=args.num_workers, progress=not args.no_progress,
                     ppocr_lower=not args.ppocr_case_sensitive, background=args.background,
                     max_pixels=round(args.max_megapixels * 1e6))
    with open(os.path.join(args.out, 'summary.md'), encoding='utf-8') as f:
        print(f.read(), end='')
    return 0


if __name__ == '__main__':
    run_tool(main)
