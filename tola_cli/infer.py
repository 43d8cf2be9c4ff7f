"""tola-infer: restore text images (a file or a folder) with a TOLA model; any size and aspect, whole photos.

  tola-infer -i LR_DIR -o results/tola                                  # the demo model (shipped; from any folder)
  tola-infer -i photo.jpg -o results/photo --model MERGED.safetensors   # a photo: its lines found and restored
  tola-infer -i LR_DIR -o results/tola -opt options/test/test_TOLA.yml [--checkpoint net_g.pth]

Each image is one text line or a photo (--kind): by default (auto, as the web page decides) a photo when it is more
than 256 rows high, or more than 128 and less than twice as wide as high, else a line; --kind line or --kind photo
(--detect) decides for every image. Each image's progress line says what it was restored as and why.

A line is resized to height 128 with its aspect kept; narrower than 512 it is padded and the pad cropped off
afterwards, wider it is restored in overlapping 128x512 windows blended over --overlap columns. Its output is 128
high (aspect kept), or --outscale times the input; prior.csv holds the text prior of each line's output. In a
photo, PP-OCRv4 finds the text lines; each is rectified, restored and pasted back (the restored lines resized to
their place), and a JSON lists the lines (polygon, PP-OCRv4 text before and after, text prior and its mean
confidence). A photo's output is its own size, or --outscale times it.

Outputs: OUT/<name><suffix>.<ext> (subfolders kept with --recursive), written atomically. An image whose output
exists is skipped (a rerun continues an interrupted run) unless --overwrite; an output may never replace an input
(same file, by device and inode); prior.csv gains this run's rows and keeps the others'. One run at a time per
output folder (a second is refused with the first's PID). Bounds checked before any work, each an error naming the
image, the limit and the option: --max-megapixels (read from the header, before decoding), --max-windows,
--max-output-megapixels. A file that cannot be read or restored is reported and skipped, the others go on; the
run ends with a summary: the images restored, the photos written as they were (no line found, or no restored line
read as well as the original with its colours held), the files left out; exit status 1 if any file failed, 130
after Ctrl-C.
docs/restore.md and docs/reliability.md have the details: the docs/ pages named here are in the source repository
(tola-plugin's docs/ folder), not in a pip install.
"""
import argparse
import math

from tola_cli.arguments import rgb_triple, shown
from tola_cli.defaults import (BACKENDS, COLOR_FIXES, DEFAULT_COLOR_FIX, IMAGE_KINDS, INFER_OUTPUT, MAX_OUTPUT_PIXELS,
                               MAX_PIXELS, MAX_WINDOWS, OVERLAP, PAD_MODES, PASTE_POLICIES, PRECISIONS, SEED, WHITE)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='tola-infer', description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-i', '--input', help='an image file or a folder of images (required unless --show-runtime)')
    parser.add_argument('-o', '--output', default=INFER_OUTPUT, help=f'output folder ({INFER_OUTPUT})')
    model = parser.add_mutually_exclusive_group()
    model.add_argument(
        '--model', help='merged TOLA model (.safetensors from tola-export-merged); default: the demo model (the '
        "package's demo backbone and adaptation, merged once into ~/.cache/tola-plugin/demo/; `make demo`'s own is "
        'experiments/demo_TOLA/TOLA_demo_merged.safetensors)')
    model.add_argument('-opt', help='TOLA option file (network_g + path.pretrain_network_g), instead of --model')
    parser.add_argument(
        '--checkpoint', help='with -opt: adaptation checkpoint (default: path.pretrain_network_g; '
        "demo: the demo model's, with network_g.backbone_init demo)")
    parser.add_argument('--suffix', default='', help='appended to each output name (none)')
    parser.add_argument('--ext', choices=('auto', 'png', 'jpg'), default='auto',
                        help='output format; auto: jpg for .jpg/.jpeg inputs, png otherwise')
    parser.add_argument(
        '-s', '--outscale', type=float,
        help="output size relative to the input (default: a line's output is 128 high, a photo's its own size)")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        '--kind', choices=IMAGE_KINDS,
        help='what each image is: auto (default, as the web page decides: a photo when more than 256 rows high, or '
        'more than 128 and less than twice as wide as high, else one line), line (one text line, restored whole; '
        'prior.csv) or photo (PP-OCRv4 finds its text lines, each restored in place; a JSON per photo)')
    kind.add_argument('--detect', action='store_true', help='every image a photo: the same as --kind photo')
    parser.add_argument('--overlap', type=int, default=OVERLAP,
                        help=f'columns shared by neighbouring 128x512 windows of a wide line ({OVERLAP}; 0-511)')
    parser.add_argument('--pad-mode', choices=PAD_MODES, default=PAD_MODES[0],
                        help=f'padding of a line narrower than 512 ({PAD_MODES[0]})')
    parser.add_argument(
        '--batch-size', type=int,
        help='128x512 windows per step, across the lines of a photo and the images of a folder; each window '
        'runs alone, so results do not depend on it (default: from the free memory, 1-8)')
    parser.add_argument('--device', help='cpu, cuda, cuda:1, ... (default: cuda when available, else cpu)')
    parser.add_argument(
        '--precision', choices=PRECISIONS,
        help="compute precision (default: the model's, fp32; auto: a precision per stage where it is "
        "fast and keeps the one-step latent within the qualification's bounds; docs/inference.md)")
    parser.add_argument(
        '--backend', choices=BACKENDS, default=BACKENDS[0],
        help='runtime of the IDM and VAE (auto: OpenVINO on the CPU where it qualifies, else torch; on a GPU torch; '
        'docs/inference.md)')
    parser.add_argument(
        '--requalify', action='store_true',
        help="forget this machine's verdicts on the model's fast paths and qualify them again (docs/inference.md)")
    parser.add_argument('--show-runtime', action='store_true',
                        help='decide where and how the model runs (qualifying what needs it), print it and exit')
    parser.add_argument(
        '--color-fix', choices=COLOR_FIXES, default=DEFAULT_COLOR_FIX,
        help=f"match the output's colours to the input's ({DEFAULT_COLOR_FIX}; none: the network's own, the paper's "
        'outputs; docs/restore.md)')
    parser.add_argument(
        '--paste', choices=PASTE_POLICIES, default=PASTE_POLICIES[0],
        help='in a photo, the restored lines put into it: checked (those PP-OCRv4 reads as well as the '
        'original whose ink and seam kept their colours; the others stay as they were, the JSON says why) or all')
    parser.add_argument('--seed', type=int, default=SEED,
                        help=f'base of the per-image noise seeds ({SEED}; the same file name gets the same noise)')
    parser.add_argument('--recursive', action='store_true', help='also images in subfolders of a folder input')
    parser.add_argument('--overwrite', action='store_true', help='replace existing outputs')
    parser.add_argument('--alpha-background', type=rgb_triple, default=WHITE, metavar='R,G,B',
                        help=f'colour under transparent pixels ({",".join(map(str, WHITE))})')
    parser.add_argument(
        '--max-megapixels', type=float, default=MAX_PIXELS / 1e6,
        help=f'image budget: larger inputs are refused from their header, before decoding '
        f'({MAX_PIXELS / 1e6:g} million pixels)')
    parser.add_argument(
        '--max-windows', type=int, default=MAX_WINDOWS,
        help=f'128x512 windows (network calls) one image may need: a line, or all lines of a photo ({MAX_WINDOWS})')
    parser.add_argument('--max-output-megapixels', type=float, default=MAX_OUTPUT_PIXELS / 1e6,
                        help=f'pixels of one output image ({MAX_OUTPUT_PIXELS / 1e6:g} million)')
    parser.add_argument('--timestep', type=int,
                        help="inference control: the q-sample and IDM timestep (default: the model's)")
    parser.add_argument('--noise', choices=('gaussian', 'zero'), help='inference control: the noise mode')
    parser.add_argument('--debug', action='store_true', help='show the traceback of an error (default: one line)')
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and check the arguments with the standard library only (``--help`` exits here, fast)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.input and not args.show_runtime:
        parser.error('the following arguments are required: -i/--input')
    args.kind = 'photo' if args.detect else args.kind or IMAGE_KINDS[0]  # --detect: kept for existing scripts
    if not args.output:
        parser.error("-o/--output '': expected the output folder (made when missing)")
    if args.checkpoint and not args.opt:
        parser.error('--checkpoint goes with -opt (a merged --model already holds its adaptation)')
    if args.batch_size is not None and args.batch_size < 1:
        parser.error(f'--batch-size must be >= 1, got {shown(args.batch_size)}')
    if not 0 <= args.overlap < 512:
        parser.error(f'--overlap must be in [0, 511], got {shown(args.overlap)}')
    if args.outscale is not None and not (math.isfinite(args.outscale) and args.outscale > 0):
        parser.error(f'--outscale must be a finite number > 0, got {shown(args.outscale)}')
    for flag, value in (('--max-megapixels', args.max_megapixels), ('--max-windows', args.max_windows),
                        ('--max-output-megapixels', args.max_output_megapixels)):
        if not (math.isfinite(value) and value > 0):
            parser.error(f'{flag} must be a finite number > 0, got {shown(value)}')
    return args


def main(argv=None) -> int:
    """Run the command (for tests and tools): usage errors exit via argparse; bad input raises. What can be decided
    without torch is decided first (the model's and option file's presence, the outputs to skip); the networks are
    imported and loaded only when there is something to restore."""
    args = parse_args(argv)
    from tola_plugin.utils.user_paths import check_regular_file  # standard library only
    expected = {'--model': 'a merged TOLA model, from tola-export-merged', '-opt': 'a TOLA option file'}
    for flag, path in (('--model', args.model), ('-opt', args.opt)):
        try:  # a folder, a FIFO or a device is said for what it is, before anything could wait on it
            path is None or check_regular_file(path, flag, expected[flag])
        except FileNotFoundError:
            raise FileNotFoundError(f'{flag} {path}: no such file (expected {expected[flag]}; without --model and '
                                    '-opt tola-infer runs the demo model)') from None
    if args.device is not None:  # a device asked for and absent: an error before anything is read
        from tola_plugin.inference.pipeline import TOLAPipeline
        TOLAPipeline.check_placement(args.device, args.backend)
    from tola_plugin.inference.folder_run import restore_folder, show_runtime  # the package, once parsed (light)
    switches = {
        name: value
        for name, value in (('precision', args.precision), ('timestep', args.timestep), ('noise', args.noise))
        if value is not None
    }

    def pipeline():
        from tola_plugin.inference.pipeline import TOLAPipeline  # the networks: only when there is work
        return TOLAPipeline.load(args.model, args.opt, args.checkpoint, switches, args.device, args.backend,
                                 requalify=args.requalify, overlap=args.overlap, pad_mode=args.pad_mode,
                                 batch_size=args.batch_size, background=args.alpha_background,
                                 max_pixels=round(args.max_megapixels * 1e6), max_windows=args.max_windows,
                                 max_output_pixels=args.max_output_megapixels * 1e6, color_fix=args.color_fix,
                                 paste=args.paste)

    if args.show_runtime:
        return show_runtime(pipeline)
    return restore_folder(input=args.input, output=args.output, pipeline=pipeline, suffix=args.suffix, ext=args.ext,
                          kind=args.kind, outscale=args.outscale, seed=args.seed, recursive=args.recursive,
                          overwrite=args.overwrite)


def cli(argv=None):
    """Console script ``tola-infer``: bad input or configuration ends in one ``error: ...`` line."""
    args = parse_args(argv)
    from tola_plugin.utils.cli_errors import run_tool
    run_tool(lambda: main(argv), debug=args.debug)


if __name__ == '__main__':
    cli()
