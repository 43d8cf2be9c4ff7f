#!/usr/bin/env python
"""Screenshot of the web demo for the README: start `tola-web` on 127.0.0.1, open it in headless Chromium, restore
an example, and save the whole page as a PNG.

    python tools/web_screenshot.py --out docs/images/tola_web.png                     # the demo model (make demo)
    python tools/web_screenshot.py --out shot.png --model MERGED.safetensors --detect --example photo.png

Needs Chromium and chromedriver (tools/setup_env.sh installs them as root). An existing --out is kept unless
--overwrite. The server and the browser are stopped before the tool ends.
"""
import argparse
import sys

from tola_cli.command import run_command

EXAMPLE = 'line_1x10.png'  # tola_plugin/assets/rendered_samples: a 320x32 line, Chinese and Latin


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument('--out', required=True, help='PNG to write')
    parser.add_argument('--model', help='merged model (default: the demo model of make demo)')
    parser.add_argument('--detect', action='store_true', help='serve in detect mode (photos)')
    parser.add_argument('--example', default=EXAMPLE,
                        help=f'file name of a bundled example, or a path to any image ({EXAMPLE})')
    parser.add_argument('--width', type=int, default=1280, help='browser window width in CSS pixels (1280)')
    parser.add_argument('--timeout', type=float, default=120.0, help='seconds to wait for the result (120)')
    parser.add_argument('--overwrite', action='store_true', help='replace an existing --out')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_cli import web  # after parsing: --help and usage errors import nothing heavy
    from tola_lab.browser.screenshot import screenshot_web_demo
    from tola_plugin.utils.user_text import say
    web_args = ['--port', '0'] + (['--model', args.model] if args.model else []) + (['--detect'] if args.detect else [])
    status = screenshot_web_demo(lambda: web.main(web_args, block=False), args.out, args.example, args.width,
                                 args.timeout, args.overwrite)
    say(f'wrote {args.out}: {status}', sys.stdout)
    return 0


if __name__ == '__main__':
    run_command(main, parse_args)
