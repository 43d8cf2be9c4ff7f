"""tola-web: a web page to try a TOLA model: upload, paste or pick a text image, see it restored beside the input.

  tola-web                                         # the demo model (shipped; from any folder), http://127.0.0.1:7860
  tola-web --model MERGED.safetensors              # your merged model (tola-export-merged)

The page shows the input and the restored output side by side (for a photo also the input with the detected lines
outlined; a switch on the page says whether an image is one line or a photo, auto by default), the text prior
TransOCR read and its mean confidence, PP-OCRv4's reading of each line before and after restoring, and the time
taken. Bad uploads (not an image, more than --max-megapixels, read from the header before
decoding, or --max-file-mb; more windows or output pixels than --max-windows / --max-output-megapixels) get a
message on the page; the server keeps running. It listens on 127.0.0.1 only, unless --host says otherwise, and
nothing is fetched from the internet (docs/web.md). Needs the [web] extra (gradio).
"""
import argparse
import math

from tola_cli.arguments import listen_host, shown
from tola_cli.defaults import (BACKENDS, COLOR_FIXES, DEFAULT_COLOR_FIX, MAX_OUTPUT_PIXELS, MAX_WINDOWS, PRECISIONS,
                               STORED_UPLOADS_MAX_MB, UPLOAD_MAX_MB, UPLOAD_MAX_MEGAPIXELS, WEB_HOST, WEB_PORT)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='tola-web', description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        '--model', help='merged TOLA model (.safetensors from tola-export-merged); default: the demo model (the '
        "package's demo backbone and adaptation, merged once into ~/.cache/tola-plugin/demo/)")
    parser.add_argument(
        '--detect', action='store_true',
        help="start the page's switch at photo (PP-OCRv4 finds the text lines, each restored in place); without it "
        'the switch starts at auto: a photo when the image is taller than two lines or not wide, else one line')
    parser.add_argument('--device', help='cpu, cuda, cuda:1, ... (default: cuda when available, else cpu)')
    parser.add_argument(
        '--precision', choices=PRECISIONS,
        help="compute precision (default: the model's, fp32; auto: a precision per stage where it is "
        "fast and keeps the one-step latent within the qualification's bounds; docs/inference.md)")
    parser.add_argument(
        '--backend', choices=BACKENDS, default=BACKENDS[0],
        help='runtime of the IDM and VAE (auto: OpenVINO on the CPU when installed, else torch; on a GPU torch)')
    parser.add_argument('--color-fix', choices=COLOR_FIXES, default=DEFAULT_COLOR_FIX,
                        help=f"the page's initial colour fix ({DEFAULT_COLOR_FIX}; none: the network's own colours)")
    parser.add_argument('--host', default=WEB_HOST, type=listen_host,
                        help=f'address to listen on ({WEB_HOST}: this machine only; 0.0.0.0 for the network)')
    parser.add_argument(
        '--allowed-host', action='append', default=[], metavar='NAME',
        help='a name the page is visited by (a DNS name of this machine, a reverse proxy\'s), besides localhost, its '
        'IP addresses and --host; requests under other names are refused (DNS rebinding). Repeatable')
    parser.add_argument('--port', type=int, default=WEB_PORT, help=f'port ({WEB_PORT}); 0: any free port')
    parser.add_argument('--max-megapixels', type=float, default=UPLOAD_MAX_MEGAPIXELS,
                        help=f'larger images are refused with a message ({UPLOAD_MAX_MEGAPIXELS} million pixels)')
    parser.add_argument('--max-file-mb', type=float, default=UPLOAD_MAX_MB,
                        help=f'larger uploads are refused by the server ({UPLOAD_MAX_MB:g} MB)')
    parser.add_argument(
        '--max-stored-mb', type=float, default=STORED_UPLOADS_MAX_MB,
        help='everything the server stores at once (uploads, the images shown, the examples); finished files are '
        f'removed first, an upload not yet restored after 10 minutes ({STORED_UPLOADS_MAX_MB:g} MB)')
    parser.add_argument('--max-windows', type=int, default=MAX_WINDOWS,
                        help=f'128x512 windows (network calls) one image may need ({MAX_WINDOWS})')
    parser.add_argument('--max-output-megapixels', type=float, default=MAX_OUTPUT_PIXELS / 1e6,
                        help=f'pixels of one output image ({MAX_OUTPUT_PIXELS / 1e6:g} million)')
    parser.add_argument('--debug', action='store_true', help='show the traceback of an error (default: one line)')
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and check the arguments with the standard library only (``--help`` exits here, fast)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f'--port must be in [0, 65535], got {shown(args.port)}')
    for flag, value in (('--max-megapixels', args.max_megapixels), ('--max-file-mb', args.max_file_mb),
                        ('--max-stored-mb', args.max_stored_mb), ('--max-windows', args.max_windows),
                        ('--max-output-megapixels', args.max_output_megapixels)):
        if not (math.isfinite(value) and value > 0):
            parser.error(f'{flag} must be a finite number > 0, got {shown(value)}')
    if args.max_stored_mb < args.max_file_mb:
        parser.error(f'--max-stored-mb ({args.max_stored_mb:g}) must hold at least one upload (--max-file-mb, '
                     f'{args.max_file_mb:g})')
    for name in args.allowed_host:
        if not name or any(c in name for c in '/:@ ') or not name.isprintable():
            parser.error(f'--allowed-host {name!r}: expected a host name without port or scheme (tola.example.org)')
    return args


def main(argv=None, block: bool = True):
    """Run the command (for tests and tools): usage errors exit via argparse; bad input raises. Serves until stopped;
    with ``block`` False returns the running app instead (``.close()`` stops it)."""
    args = parse_args(argv)
    try:
        from tola_plugin.web.server import serve  # heavy imports (gradio, torch) only after parsing
    except ImportError as err:
        if 'gradio' not in str(err):
            raise
        raise OSError('tola-web needs gradio: pip install "tola-plugin[web]" (or pip install -r '
                      'requirements.txt)') from err
    app = serve(model=args.model, detect=args.detect, precision=args.precision, device=args.device,
                backend=args.backend, color_fix=args.color_fix, max_windows=args.max_windows,
                max_output_megapixels=args.max_output_megapixels, max_megapixels=args.max_megapixels,
                max_file_mb=args.max_file_mb, host=args.host, port=args.port, block=block,
                max_stored_mb=args.max_stored_mb, allowed_hosts=args.allowed_host)
    return 0 if block else app


def cli(argv=None):
    """Console script ``tola-web``: bad input or configuration ends in one ``error: ...`` line."""
    args = parse_args(argv)
    from tola_plugin.utils.cli_errors import run_tool
    run_tool(lambda: main(argv), debug=args.debug)


if __name__ == '__main__':
    cli()
