"""The server of the web page (``launch``) and the body of ``tola-web`` (``serve``): the page of ``page.build_app``
behind the HTTP bounds (``http_bounds``), its folder bounded (``uploads.Store``) and removed when it stops (Ctrl-C,
SIGTERM, ``WebServer.close()``, the process's exit) and, if the process was killed, by the next server's start."""
import os
import shutil
import signal
import sys
import threading
from typing import Optional, Sequence

from tola_plugin.inference.demo_model import demo_model_path, is_demo_model
from tola_plugin.inference.pipeline import DEFAULT_COLOR_FIX, TOLAPipeline
from tola_plugin.inference.work_bounds import DEFAULT_MAX_OUTPUT_PIXELS, DEFAULT_MAX_WINDOWS
from tola_plugin.utils.user_text import say
from tola_plugin.web.http_bounds import LOCAL_NAMES, UPLOAD_MAX_MB, RequestGuard, bounded_connections
from tola_plugin.web.page import PAGE_CSS, UPLOAD_MAX_MEGAPIXELS, WebPage, build_app, warm_up
from tola_plugin.web.uploads import STORED_UPLOADS_MAX_MB


def _interrupt(signum, frame):
    raise KeyboardInterrupt


class WebServer:
    """A ``page`` being served (``launch``) at ``local_url``; ``close()`` stops the server, removes the page's folder
    and gives GRADIO_TEMP_DIR back; closing twice is closing once."""

    def __init__(self, page: WebPage, local_url: str):
        self.page, self.local_url, self.closed = page, local_url, False

    def close(self, verbose: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.page.blocks.close(verbose)
        finally:
            release_folder(self.page)


def release_folder(page: WebPage) -> None:
    """Remove the page's folder; GRADIO_TEMP_DIR back to what it was before the page, where it is still the page's."""
    shutil.rmtree(page.folder, ignore_errors=True)
    if os.environ.get('GRADIO_TEMP_DIR') == page.folder:
        os.environ.pop('GRADIO_TEMP_DIR')
        if page.previous_temp is not None:
            os.environ['GRADIO_TEMP_DIR'] = page.previous_temp


def launch(page: WebPage, host: str = '127.0.0.1', port: Optional[int] = None, max_file_mb: float = UPLOAD_MAX_MB,
           block: bool = True, max_stored_mb: float = STORED_UPLOADS_MAX_MB,
           allowed_hosts: Sequence[str] = ()) -> WebServer:
    """Serve ``page`` on host:port (port None: 7860 or the next free one) under the names ``host``, LOCAL_NAMES,
    ``allowed_hosts`` and its IP addresses, with uploads limited to ``max_file_mb`` per file and one file's worth per
    request, from the page itself only (``RequestGuard``), everything stored in the page's folder, which holds at most
    ``max_stored_mb`` (``Store``) and is removed when the server stops; connections bounded (``BoundedHTTP``); no
    share link, no server-side rendering (needs Node), API page off. block=False returns the running ``WebServer``
    after start-up (its ``close()`` stops it and removes the uploads); block=True serves until stopped."""
    from gradio import http_server
    from starlette.middleware import Middleware
    store = page.store
    store.max_bytes = int(max_stored_mb * 2**20)
    need = store.used() + int(max_file_mb * 2**20)
    if need > store.max_bytes:
        raise ValueError(f'--max-stored-mb {max_stored_mb:g} cannot hold the page\'s own files (the examples: '
                         f'{store.used() / 2**20:.2f} MB) and one upload of --max-file-mb {max_file_mb:g}; give at '
                         f'least {need / 2**20:.2f}')
    os.environ['GRADIO_TEMP_DIR'] = page.folder  # Gradio reads it when launch makes its app, and at each request
    hosts = {*LOCAL_NAMES, host, *allowed_hosts}
    try:
        with bounded_connections(http_server):
            page.blocks.launch(
                server_name=host, server_port=port, share=False, ssr_mode=False, mcp_server=False,
                max_file_size=int(max_file_mb * 2**20), show_error=True, quiet=True, inbrowser=False, footer_links=[],
                prevent_thread_lock=True, enable_monitoring=False, css=PAGE_CSS, app_kwargs={
                    'middleware': [Middleware(RequestGuard, max_file_mb=max_file_mb, store=store, hosts=hosts)]
                })
    except BaseException:
        release_folder(page)
        raise
    server = WebServer(page, page.blocks.local_url)
    # our own line instead of Gradio's (quiet): its advice to "set share=True in launch()" is for Python users, and
    # this page makes no share link
    reach = 'this machine only' if host in ('127.0.0.1', 'localhost', '::1') else f'every address of {host}'
    say(f'tola-web: serving {server.local_url} ({reach}); Ctrl-C stops it', sys.stdout)
    if block:
        if threading.current_thread() is threading.main_thread():  # SIGTERM stops the server as Ctrl-C does
            signal.signal(signal.SIGTERM, _interrupt)
        try:
            page.blocks.block_thread()
        finally:
            server.close()
    return server


def free_port(host: str) -> int:
    """A port free on ``host`` now."""
    import socket
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def serve(model: Optional[str] = None, detect: bool = False, precision: Optional[str] = None, device=None,
          backend: str = 'auto', color_fix: str = DEFAULT_COLOR_FIX, max_windows: int = DEFAULT_MAX_WINDOWS,
          max_output_megapixels: float = DEFAULT_MAX_OUTPUT_PIXELS / 1e6, max_megapixels: float = UPLOAD_MAX_MEGAPIXELS,
          max_file_mb: float = UPLOAD_MAX_MB, host: str = '127.0.0.1', port: Optional[int] = None, block: bool = True,
          max_stored_mb: float = STORED_UPLOADS_MAX_MB, allowed_hosts: Sequence[str] = ()) -> WebServer:
    """The body of tola-web: load the merged ``model`` (None: the demo model) as a ``TOLAPipeline`` (where and how it
    runs: the runtime decision, printed and shown on the page), warm it up, build the page and serve it on
    host:port (port None: a free one). Blocks until stopped unless ``block`` is False; returns the ``WebServer``
    (``.close()`` stops it)."""
    path = model if model is not None else demo_model_path(say=lambda m: say(f'tola-web: {m}'))
    pipeline = TOLAPipeline.from_merged(path, switches={'precision': precision} if precision else {}, device=device,
                                        backend=backend, color_fix=color_fix, max_windows=max_windows,
                                        max_output_pixels=max_output_megapixels * 1e6)
    say(f'tola-web: {pipeline.describe_runtime()}')
    warm_up(pipeline, detect=True)  # the page restores photos too (its switch): PP-OCRv4's detector loaded now
    demo = is_demo_model(path)  # by what the model is, not by where it lies
    page = build_app(pipeline, detect=detect, demo_model=demo, max_megapixels=max_megapixels, model_name=model
                     or 'the demo model')
    return launch(page, host=host, port=port or free_port(host), max_file_mb=max_file_mb, block=block,
                  max_stored_mb=max_stored_mb, allowed_hosts=allowed_hosts)
