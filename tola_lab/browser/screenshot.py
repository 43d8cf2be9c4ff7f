"""A screenshot of the web demo (tools/web_screenshot.py, docs/web.md): a running tola-web page opened in headless
Chromium (``tola_lab.browser.headless_browser``), an example restored, the whole page saved as a PNG.
"""
import base64
import os
from typing import Callable

from tola_lab.browser.headless_browser import find_chromium, quit_chromium, restore_in_page, start_chromium
from tola_plugin.data.image_io import write_file_bytes
from tola_plugin.web.examples import example_paths


def find_example(example: str) -> str:
    """``example`` when it is a file, else the bundled example of that file name. ValueError for neither."""
    if os.path.isfile(example):
        return example
    named = [p for p in example_paths() if os.path.basename(p) == example]
    if not named:
        raise ValueError(f'--example {example}: neither a file nor a bundled example '
                         f'({", ".join(os.path.basename(p) for p in example_paths())})')
    return named[0]


def screenshot_web_demo(start_app: Callable, out: str, example: str, width: int = 1280, timeout: float = 120.0,
                        overwrite: bool = False) -> str:
    """Start the page with ``start_app()`` (returns the running ``WebServer``: ``.local_url``, ``.close()``), restore
    ``example`` (a file or a bundled example's name) in a headless Chromium ``width`` CSS pixels wide (waiting at
    most ``timeout`` seconds), and write the whole page as a PNG to ``out``. The browser and the app are stopped
    before it returns the page's status line. ValueError when ``out`` exists (unless ``overwrite``) or the example
    is unknown, OSError without Chromium, RuntimeError when the page does not restore the example."""
    if os.path.exists(out) and not overwrite:
        raise ValueError(f'{out} exists; pass --overwrite to replace it')
    found, reason = find_chromium()
    if found is None:
        raise OSError(reason)
    example = find_example(example)
    app = start_app()
    browser = None
    try:
        browser = start_chromium(*found, width=width, height=900, timeout=timeout)
        state = restore_in_page(browser, app.local_url, example, timeout=timeout)
        if not state.status.startswith('Restored'):
            raise RuntimeError(f'the page did not restore {example}: {state.status}')
        # the whole page, not only the window (Chrome DevTools protocol)
        shot = browser.execute_cdp_cmd('Page.captureScreenshot', {'format': 'png', 'captureBeyondViewport': True})
        write_file_bytes(out, base64.b64decode(shot['data']))  # atomic, its folder made
    finally:
        if browser is not None:
            quit_chromium(browser)
        app.close()
    return state.status
