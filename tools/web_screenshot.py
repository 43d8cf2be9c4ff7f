#!/usr/bin/env python
"""Screenshot of the web demo for the README: start `tola-web` on 127.0.0.1, open it in headless Chromium, restore
an example, and save the whole page as a PNG.

    python tools/web_screenshot.py --out docs/images/tola_web.png                     # the demo model (make demo)
    python tools/web_screenshot.py --out shot.png --model MERGED.safetensors --detect --example photo.png

Needs Chromium and chromedriver (tools/setup_env.sh installs them as root). An existing --out is kept unless
--overwrite. The server and the browser are stopped before the tool ends.
"""
import argparse
import base64
import os
import sys

EXAMPLE = 'line_1x10.png'  # tola_plugin/rendered_samples: a 320x32 line, Chinese and Latin


def main(argv=None) -> int:
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
    args = parser.parse_args(argv)
    if os.path.exists(args.out) and not args.overwrite:
        raise ValueError(f'{args.out} exists; pass --overwrite to replace it')

    from tola_cli import web
    from tola_plugin.inference.web_examples import example_paths
    from tola_plugin.utils.headless_browser import find_chromium, quit_chromium, restore_in_page, start_chromium
    found, reason = find_chromium()
    if found is None:
        raise OSError(reason)
    example = args.example
    if not os.path.isfile(example):
        named = [p for p in example_paths() if os.path.basename(p) == example]
        if not named:
            raise ValueError(f'--example {example}: neither a file nor a bundled example '
                             f'({", ".join(os.path.basename(p) for p in example_paths())})')
        example = named[0]
    argv_web = ['--port', '0'] + (['--model', args.model] if args.model else []) + (['--detect'] if args.detect else [])
    app = web.run(web.parse_args(argv_web), block=False)
    browser = None
    try:
        browser = start_chromium(*found, width=args.width, height=900, timeout=args.timeout)
        state = restore_in_page(browser, app.local_url, example, timeout=args.timeout)
        if not state.status.startswith('Restored'):
            raise RuntimeError(f'the page did not restore {example}: {state.status}')
        # the whole page, not only the window (Chrome DevTools protocol)
        shot = browser.execute_cdp_cmd('Page.captureScreenshot', {'format': 'png', 'captureBeyondViewport': True})
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, 'wb') as f:
            f.write(base64.b64decode(shot['data']))
    finally:
        if browser is not None:
            quit_chromium(browser)
        app.close()
    print(f'wrote {args.out}: {state.status}')
    return 0


if __name__ == '__main__':
    from tola_plugin.utils.cli_errors import run_tool
    run_tool(lambda: main(sys.argv[1:]))
