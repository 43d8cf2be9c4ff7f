"""The web demo of ``tola-web`` (docs/web.md): upload, paste or pick a text image, see it restored by a
``TOLAPipeline`` next to the input, with the text prior, PP-OCRv4's reading before and after, and the time taken.

    app = build_app(TOLAPipeline.from_merged(path))   # the page's switch: auto, one text line, or a photo
    launch(app, port=7860)

``restore_upload`` does the work of one request (read and check the file, restore, draw the detected lines) and is
plain Python, so it is tested without a browser; ``build_app`` lays it out with Gradio. Nothing leaves the machine:
Gradio's analytics and version check are off (GRADIO_ANALYTICS_ENABLED=False, set before gradio is imported), its
default theme's fonts are served by the app itself, the Hugging Face hub is put offline, and no share link is made.

Uploads are bounded and cleaned up (``launch``, ``RequestGuard``, ``Store``): Gradio refuses a file over
``max_file_mb``, and a request body over one file's worth (``max_file_mb`` plus the form around it; many files in one
request) is refused with 413 before it is read, or cut when it grows past that while read (whatever its headers say); a
request under a name the server was not started for (``Host``: DNS rebinding) or a write from another site (its
``Origin``) is refused with 403; everything the server stores is bounded in all (``max_stored_mb``: uploads, the images
the page shows, the page's own files), and only what is finished is removed to make room. Connections are bounded
(``BoundedHTTP``: headers within HEADER_TIMEOUT_S, no pause over BODY_IDLE_TIMEOUT_S in a body, at most
MAX_CONNECTIONS open). Names shown on the page are text,
never Markdown (``user_text.markdown_text``). Uploads go to a folder of this server's own (``tola-web-<pid>-*`` in the
temporary folder), removed when the server stops (Ctrl-C, SIGTERM, ``app.close()``, the process's exit) and, if the
process was killed, by the next server's start.
"""
import os

os.environ['GRADIO_ANALYTICS_ENABLED'] = 'False'  # no telemetry, no version check (read when gradio is imported)
os.environ.setdefault('HF_HUB_OFFLINE', '1')

import atexit  # noqa: E402
import contextlib  # noqa: E402
import glob  # noqa: E402
import hashlib  # noqa: E402
import ipaddress  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple  # noqa: E402

import cv2  # noqa: E402
import gradio as gr  # noqa: E402
import h11  # noqa: E402
import numpy as np  # noqa: E402
from starlette.formparsers import MultiPartException  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402

from tola_plugin.data.image_io import ImageTooLargeError, encode_image, read_image_file, write_file_bytes  # noqa: E402
from tola_plugin.inference.color_fix import COLOR_FIXES, check_color_fix  # noqa: E402
from tola_plugin.inference.demo_model import demo_model_path, is_demo_model  # noqa: E402
from tola_plugin.inference.image_kind import AUTO_REASONS, KINDS, check_kind, is_photo  # noqa: E402
from tola_plugin.inference.pipeline import DEFAULT_COLOR_FIX, Restoration, TOLAPipeline  # noqa: E402
from tola_plugin.inference.work_bounds import DEFAULT_MAX_OUTPUT_PIXELS, DEFAULT_MAX_WINDOWS  # noqa: E402
from tola_plugin.utils.procfs import pid_alive  # noqa: E402
from tola_plugin.utils.progress import step_notes  # noqa: E402
from tola_plugin.utils.user_text import markdown_text, say  # noqa: E402
from tola_plugin.web.examples import example_paths  # noqa: E402

# The page's own bounds, below the tools' (tola-infer's image budget is data.image_io.DEFAULT_MAX_PIXELS, 64 MP)
UPLOAD_MAX_MEGAPIXELS = 4.0  # an uploaded image with more pixels is refused (CPU time grows with the pixels)
UPLOAD_MAX_MB = 20.0  # larger uploads are refused by the server before they are stored
STORED_UPLOADS_MAX_MB = 200.0  # everything the server stores at once (uploads, shown images, the page's own files)
#: an upload not yet restored is removed to make room only after waiting this long (seconds); younger ones are kept and
#: what does not fit is refused
PENDING_MAX_AGE_S = 600.0
HEADER_TIMEOUT_S = 10.0  # a request's line and headers must arrive within this; half-open requests held 1,500 fds
BODY_IDLE_TIMEOUT_S = 30.0  # a request body that stops arriving for this long is cut (the rest of a stalled upload)
MAX_CONNECTIONS = 256  # connections open at once; one more is closed when accepted
LOCAL_NAMES = ('localhost', '127.0.0.1', '::1')  # names of this machine, served whatever --host is
FORM_BYTES = 64 * 1024  # a request may carry one file of max_file_mb plus this much multipart form around it
UPLOADS_PREFIX = 'tola-web-'
TABLE_HEADERS = ['line', 'text prior (TransOCR)', 'prior confidence', 'PP-OCRv4 before', 'PP-OCRv4 after']
IMAGE_HEIGHT = 220  # display height (CSS pixels) of the input and restored images
OVERLAY_COLOUR = (255, 64, 0)
# input and output fill the same box, so a 32-row input is seen next to its 128-row restoration; the input's pixels
# stay visible as blocks (no smoothing that would flatter it)
PAGE_CSS = ('#tola-input img, #tola-restored img {width: 100%; height: 100%; object-fit: contain;} '
            '#tola-input img {image-rendering: pixelated;}')  # RGB of the detected-line outlines
DEMO_NOTE = ('**Demo model.** This page serves a model of the small demo backbone (a tiny demo backbone trained in '
             'this repository on rendered lines, adapted with TOLA; docs/demo_backbone.md), not the paper\'s weights: '
             "it shows the pipeline, not TOLA's quality. Give `--model` a merged model of the official weights for "
             'real restorations.')


@dataclass
class PageResult:
    """What the page shows for one request: images RGB uint8 (H, W, 3) (overlay only for a photo), the table rows
    (TABLE_HEADERS), a one-paragraph summary (Markdown) and whether it was restored as a photo."""
    input: np.ndarray
    restored: np.ndarray
    overlay: Optional[np.ndarray]
    rows: List[List]
    summary: str
    detected: bool = False


def draw_lines(rgb: np.ndarray, restoration: Restoration) -> np.ndarray:
    """The input with each detected line's polygon outlined and numbered as in the table (RGB uint8 copy)."""
    out = np.ascontiguousarray(rgb).copy()
    thickness = max(1, round(max(out.shape[:2]) / 400))
    for number, line in enumerate(restoration.lines, start=1):
        polygon = np.round(np.array(line.polygon, np.float32)).astype(np.int32)
        cv2.polylines(out, [polygon], True, OVERLAY_COLOUR, thickness, cv2.LINE_AA)
        x, y = polygon[0]
        cv2.putText(out, str(number), (int(x), max(12,
                                                   int(y) - 3)), cv2.FONT_HERSHEY_SIMPLEX, 0.4 * thickness,
                    OVERLAY_COLOUR, thickness, cv2.LINE_AA)
    return out


def _rows(restoration: Restoration) -> List[List]:

    def text(value):
        return '' if value is None else value.strip()

    return [[number, line.prior_text,
             round(line.prior_confidence, 3),
             text(line.text_before),
             text(line.text_after)] for number, line in enumerate(restoration.lines, start=1)]


def restore_upload(pipeline: TOLAPipeline, path: str, name: str = '', kind: str = 'auto',
                   max_megapixels: float = UPLOAD_MAX_MEGAPIXELS, color_fix: Optional[str] = None,
                   progress=None) -> PageResult:
    """Restore the image file ``path`` for the page (``name``: the uploaded file's name, for messages and the noise
    seed, as tola-infer seeds by file name; ``kind``: 'line' (one text line), 'photo' (PP-OCRv4 finds the lines,
    each restored in place) or 'auto' (by its shape, as tola-infer decides: ``inference.image_kind``);
    ``color_fix``: the page's choice, set on the pipeline, which serves one request at a time; None keeps the
    pipeline's; ``progress``: Gradio's, shown over the outputs: what the restoration is doing and the time left,
    ``utils.progress.step_notes``). Raises ValueError with a message for
    the page when the file is not an image, declares more than ``max_megapixels`` million pixels (read from its
    header: refused before decoding), or exceeds the pipeline's bounds (windows, output pixels)."""
    check_kind(kind)
    name = name or os.path.basename(path)
    try:
        rgb = read_image_file(path, pipeline.background, max_pixels=round(max_megapixels * 1e6), order='RGB')
    except ImageTooLargeError as err:
        size = f'{err.width}x{err.height} pixels = {err.width * err.height / 1e6:.1f} megapixels' if err.width else \
            f'more than {err.max_pixels or 0:,} pixels'
        raise ValueError(f'{name} is too large: {size}, the limit is {max_megapixels:g} (the --max-megapixels option '
                         f'of tola-web); refused before decoding') from None
    except (ValueError, OSError) as err:
        detail = str(err).removeprefix(f'{path}: ').replace(path, name)
        raise ValueError(f'{name} is not an image this demo can read: {detail}. Upload a PNG, JPEG, BMP, WebP, GIF or '
                         f'TIFF image.') from None
    if color_fix is not None:
        pipeline.color_fix = check_color_fix(color_fix)
    height, width = rgb.shape[:2]
    detect = is_photo(kind, height, width)
    start = time.perf_counter()
    # a bound of the work (windows, output pixels) is a ValueError naming the image, the limit and the option
    notes = step_notes(lambda text, fraction: progress(fraction, desc=text)) if progress is not None else None
    restoration = pipeline([rgb], detect=detect, recognize=True, names=[name], progress=notes)[0]
    seconds = time.perf_counter() - start
    out_h, out_w = restoration.image.shape[:2]
    pasted = sum(bool(line.pasted) for line in restoration.lines)
    what = (f'as a photo: {len(restoration.lines)} line(s) found, {pasted} restored in place'
            if detect else 'as one text line')
    why = {'auto': f' (kind auto: {AUTO_REASONS[detect]})'}
    summary = (f'Restored **{markdown_text(name)}** {what}{why.get(kind, "")} in **{seconds:.2f} s** on '
               f'{_path(pipeline)}: {width}×{height} → {out_w}×{out_h} pixels.')
    if detect and not restoration.lines:
        summary += ' PP-OCRv4 found no text line, so the output is the input resized.'
    elif detect and pasted < len(restoration.lines):
        summary += (f' {len(restoration.lines) - pasted} line(s) read less well restored (PP-OCRv4) or changed '
                    'colour, and were left as they were.')
    return PageResult(rgb, restoration.image,
                      draw_lines(rgb, restoration) if detect else None, _rows(restoration), summary, detect)


def error_status(err: BaseException) -> str:
    """The page's status line for a failed request: the message as text (``markdown_text``: an upload named
    ``[link](x).png`` shows as written, never as a link)."""
    return f'**Error:** {markdown_text(err)}'


def warm_up(pipeline: TOLAPipeline, detect: bool = False) -> None:
    """Restore a blank line once (with PP-OCRv4, and its detector with ``detect``), so that the models are loaded
    before the first visitor and the time the page reports is the restoration's, not the loading's."""
    pipeline(np.full((32, 128, 3), 255, np.uint8), detect=detect, recognize=True)


def _payload_path(payload) -> Optional[Dict]:
    """The uploaded file of an Image payload (dict from the page): (path, original name); None when empty."""
    if not payload:
        return None
    if isinstance(payload, str):
        return dict(path=payload, name=os.path.basename(payload))
    path = payload.get('path')
    if not path:
        raise ValueError('the upload has no file; upload it again')
    return dict(path=path, name=payload.get('orig_name') or os.path.basename(path))


def _path(pipeline: TOLAPipeline) -> str:
    """'cpu, openvino bf16': where the pipeline's network runs now."""
    plan = pipeline.plan
    return f'{pipeline.device}, ' + (f'{plan.backend} {plan.precision}' if plan is not None else 'torch')


def build_app(pipeline: TOLAPipeline, detect: bool = False, demo_model: bool = False,
              max_megapixels: float = UPLOAD_MAX_MEGAPIXELS, examples: Optional[Sequence[str]] = None,
              model_name: str = '') -> gr.Blocks:
    """The demo page around ``pipeline``: an input (upload, paste, or an example: ``examples`` paths, default
    ``example_paths()``), a visible switch of what the image is (auto, one text line, a photo: ``restore_upload``;
    ``detect`` starts it at photo, else at auto), the restored output beside it (and a photo's detected lines), the
    text table and a status line that also shows errors. demo_model: show DEMO_NOTE. model_name: shown in the
    header."""
    examples = example_paths() if examples is None else list(examples)
    folder, previous = _own_temp_folder()  # before any component: each keeps the folder it was built with

    def run(payload, color_fix, kind, progress=gr.Progress()):
        return restore_request(pipeline, app.tola_store, payload, color_fix, kind, max_megapixels, progress)

    with gr.Blocks(title='TOLA text restoration', analytics_enabled=False) as app:
        gr.Markdown('# TOLA: one-step text image super-resolution\n'
                    f'Model: `{model_name or "given TOLAPipeline"}`')
        gr.Markdown(f'`{pipeline.describe_runtime()}`', elem_id='tola-runtime')
        if demo_model:
            gr.Markdown(DEMO_NOTE, elem_id='tola-demo-note')
        with gr.Row():
            upload = gr.Image(label='Low-resolution input (upload or paste)', type='filepath', image_mode=None,
                              sources=['upload', 'clipboard'], elem_id='tola-upload')
            with gr.Column():
                button = gr.Button('Restore', variant='primary', elem_id='tola-restore')
                color_fix = gr.Radio(
                    list(COLOR_FIXES), value=pipeline.color_fix, elem_id='tola-color-fix',
                    label="Colour fix (none: the network's own colours; luma: the input's, the network's strokes; "
                    "wavelet / adain: the input's, over areas / the whole image)")
                kind = gr.Radio(
                    list(KINDS), value='photo' if detect else 'auto', elem_id='tola-kind',
                    label='The image is (auto: a photo when taller than two lines or not wide; a photo\'s lines are '
                    'found by PP-OCRv4 and each restored in place)')
                status = gr.Markdown('Upload or paste an image, or pick an example, then press **Restore**.',
                                     elem_id='tola-status')
        with gr.Row():
            # the same display height: a 32-row input is scaled up beside its 128-row restoration
            shown_input = gr.Image(label='Input', interactive=False, format='png', height=IMAGE_HEIGHT,
                                   buttons=['fullscreen'], elem_id='tola-input')
            restored = gr.Image(label='Restored', interactive=False, format='png', height=IMAGE_HEIGHT,
                                buttons=['download', 'fullscreen'], elem_id='tola-restored')
        overlay = gr.Image(label='Detected lines (photos)', interactive=False, format='png', buttons=['fullscreen'],
                           elem_id='tola-overlay')
        table = gr.Dataframe(headers=TABLE_HEADERS, label='Text of each line', interactive=False, wrap=True,
                             column_widths=['6%', '40%', '12%', '21%', '21%'], elem_id='tola-lines')
        if examples:
            gr.Examples(examples=[[p] for p in examples], inputs=[upload], label='Examples (bundled samples)')
        # preprocess=False: the handler reads the uploaded file itself (the package's reader), so a file that is
        # not an image ends in a message on the page instead of an error inside Gradio's decoder.
        button.click(run, inputs=[upload, color_fix, kind], outputs=[shown_input, restored, overlay, table, status],
                     preprocess=False, concurrency_limit=1)
    app.tola_upload_folder, app.tola_previous_temp = folder, previous
    app.tola_store = Store(folder)  # after the examples' copies: the page's own files
    return app


def restore_request(pipeline: TOLAPipeline, store: 'Store', payload, color_fix: str, kind: str,
                    max_megapixels: float = UPLOAD_MAX_MEGAPIXELS, progress=None):
    """One press of Restore -> (input, restored, overlay, table rows, status). The images shown are written into
    ``store`` by the handler itself (counted in its bound; Gradio keeps paths inside its folder as they are), and the
    upload is finished once restored: removable to make room."""
    empty = (None, None, None, [])
    try:
        upload = _payload_path(payload)
        if upload is None:
            return (*empty, 'Upload or paste an image, or pick an example, then press **Restore**.')
        store.check_present(upload['path'], upload['name'])
        page = restore_upload(pipeline, upload['path'], upload['name'], kind, max_megapixels, color_fix, progress)
        shown = store.save_images({'input': page.input, 'restored': page.restored, 'lines': page.overlay},
                                  keep=upload['path'])
        store.finish(upload['path'])
    except (ValueError, RuntimeError) as err:  # bad input; no path could restore it (never a non-finite image)
        return (*empty, error_status(err))
    return shown['input'], shown['restored'], shown['lines'], page.rows, page.summary


class BodyTooLarge(MultiPartException):
    """A request body that grew past its bound while it was read. Raised from the middleware's ``receive``, a
    ``MultiPartException`` so that Gradio's upload route (starlette's multipart parser) deletes the files it had begun
    to write; the middleware answers 413 in place of whatever the route then sends."""


class RequestGuard:
    """ASGI middleware in front of the page (``launch``); every refusal is answered before the app sees the request:

    - **Names the server was not started for** (403): a ``Host`` that is not one of ``hosts`` (nor an IP address): a
      page of another site whose name was pointed at this machine (DNS rebinding) is same-origin to the browser, so
      ``Origin`` alone lets it read and post everything. ``hosts`` None: no check.
    - **Cross-origin writes** (403): a POST (any method but GET, HEAD, OPTIONS) whose ``Origin`` is not this page's
      (``Host``), or that the browser marks ``Sec-Fetch-Site: cross-site``: a form on any other web page the user
      visits could post uploads here (a multipart POST is a "simple" request, sent without asking).
    - **Bodies over one file's worth** (413): ``Content-Length`` over one file of ``max_file_mb`` plus FORM_BYTES,
      before any of it is read; a body that grows past that while it is read, whatever its headers said, is cut
      there (the route's partial files removed); a chunked body without a length is refused (411), one with both a
      length and ``Transfer-Encoding`` too (400: the server would follow the encoding and ignore the length).
    - **Stored bytes** (``store``): an upload is let in only when it fits in the store's bound once finished files
      are removed (``Store.reserve``), else 507 saying why; its length stays reserved while it is read.
    """

    def __init__(self, app, max_file_mb: float, store: Optional['Store'] = None, hosts: Optional[Iterable[str]] = None):
        self.app, self.max_file_mb, self.store = app, max_file_mb, store
        self.hosts = None if hosts is None else frozenset(_host_name(h.encode('latin-1')) for h in hosts)
        self.max_bytes = int(max_file_mb * 2**20) + FORM_BYTES

    async def __call__(self, scope, receive, send):
        if scope['type'] not in ('http', 'websocket'):
            return await self.app(scope, receive, send)
        headers = dict(scope.get('headers') or ())
        refusal = self._refusal(scope, headers)
        if refusal:
            if scope['type'] == 'websocket':
                return await send({'type': 'websocket.close', 'code': 1008})
            return await _answer(send, *refusal)
        if scope['type'] == 'websocket' or scope.get('method') in SAFE_METHODS:
            return await self.app(scope, receive, send)
        if self.store is None or not scope.get('path', '').endswith('/upload'):
            return await self._bounded(scope, receive, send)
        length = int(headers.get(b'content-length', b'0'))
        try:
            self.store.reserve(length)
        except StoreFull as err:
            return await _answer(send, 507, f'upload refused: {err}')
        try:
            return await self._bounded(scope, receive, send)
        finally:
            self.store.release(length)

    def _refusal(self, scope, headers):
        """(status, message) of a request refused from its headers alone, else None."""
        host = headers.get(b'host', b'')
        if self.hosts is not None and not _served_name(_host_name(host), self.hosts):
            return 403, (f'refused: this server is not {host.decode("latin-1")!r} (a page of another site whose name '
                         f'leads here: DNS rebinding); it answers to {", ".join(sorted(self.hosts))} and its IP '
                         'addresses (tola-web --allowed-host NAME adds a name)')
        if scope.get('method') not in SAFE_METHODS or scope['type'] == 'websocket':
            origin = headers.get(b'origin')
            if origin is not None and _netloc(origin) != host.decode('latin-1').lower():
                return 403, (f'refused: a request from another site ({origin.decode("latin-1")!r}); this page '
                             'takes uploads from itself only')
            if headers.get(b'sec-fetch-site') == b'cross-site':
                return 403, 'refused: a request from another site; this page takes uploads from itself only'
        if scope['type'] == 'websocket':
            return None
        length = headers.get(b'content-length')
        chunked = b'chunked' in headers.get(b'transfer-encoding', b'').lower()
        if chunked and length is not None:
            return 400, 'upload refused: a request with both a Content-Length and a Transfer-Encoding'
        if chunked:
            return 411, 'upload refused: a request body needs a Content-Length'
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            size = f'{int(length) / 1e6:.1f} MB' if length.isdigit() else f'a Content-Length of {length!r}'
            return 413, self._too_large(size)
        return None

    def _too_large(self, size: str) -> str:
        return (f'upload refused: the request carries {size}; one request may carry one image of at most '
                f'{self.max_file_mb:g} MB (tola-web --max-file-mb)')

    async def _bounded(self, scope, receive, send):
        """The app with a body counted as it is read: past ``max_bytes`` the read fails (BodyTooLarge) and 413 is
        sent instead of the app's answer."""
        state = {'read': 0, 'over': False, 'started': False}

        async def counted():
            message = await receive()
            if message['type'] == 'http.request':
                state['read'] += len(message.get('body', b''))
                if state['read'] > self.max_bytes:
                    state['over'] = True
                    raise BodyTooLarge(self._too_large(f'more than {self.max_bytes / 1e6:.1f} MB'))
            return message

        async def guarded_send(message):
            if state['over']:
                return  # the 413 below answers instead
            state['started'] = state['started'] or message['type'] == 'http.response.start'
            await send(message)

        try:
            await self.app(scope, counted, guarded_send)
        except BodyTooLarge:
            pass
        if state['over'] and not state['started']:
            await _answer(send, 413, self._too_large(f'more than {self.max_bytes / 1e6:.1f} MB'))


#: a request that only reads (no upload, no restore) is never refused for its origin
SAFE_METHODS = ('GET', 'HEAD', 'OPTIONS')


def _netloc(origin: bytes) -> str:
    """'host:port' of an Origin header ('null' and anything unparsable: '')."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(origin.decode('latin-1'))
    except ValueError:
        return ''
    default = {'http': 80, 'https': 443}.get(parts.scheme)
    netloc = (parts.netloc or '').lower()
    return netloc[:-len(f':{default}')] if default and netloc.endswith(f':{default}') else netloc


async def _answer(send, status: int, message: str):
    body = message.encode()
    await send({
        'type': 'http.response.start', 'status': status, 'headers': [(b'content-type', b'text/plain; charset=utf-8'),
                                                                     (b'content-length', str(len(body)).encode()),
                                                                     (b'connection', b'close')]
    })
    await send({'type': 'http.response.body', 'body': body})


def stored_files(folder: str) -> List[Tuple[float, int, str]]:
    """(modification time, size, path) of every file under ``folder``, oldest first."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            found.append((st.st_mtime, st.st_size, path))
    return sorted(found)


def _host_name(host: bytes) -> str:
    """The name of a Host header, without its port and brackets, lower case ('[::1]:7860' -> '::1')."""
    name = host.decode('latin-1').strip().lower()
    if name.startswith('['):
        return name[1:name.find(']')] if ']' in name else name
    return (name.rsplit(':', 1)[0] if name.count(':') == 1 else name).rstrip('.')


def _served_name(name: str, hosts) -> bool:
    """Whether ``name`` (a Host's) is one the server answers to: one of ``hosts``, or an IP address (typed by the
    visitor: a rebinding page has a name of its own)."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in hosts


class StoreFull(ValueError):
    """What the store holds that may not be removed leaves no room (``Store.make_room``)."""


class Store:
    """Everything the server keeps in its ``folder`` (Gradio's temporary folder: uploads, the images the page shows,
    the page's own copies of the examples), bounded in all by ``max_bytes``. Room is made by removing, oldest first,
    what is finished (the images shown, uploads already restored), then uploads that waited more than
    PENDING_MAX_AGE_S for their restoration; never the page's own files or a younger upload: what does not fit then is
    refused (StoreFull). ``clock``: the time file times are compared with (tests inject it)."""

    def __init__(self, folder: str, max_mb: float = STORED_UPLOADS_MAX_MB, clock=time.time):
        self.folder, self.max_bytes, self.clock = os.path.realpath(folder), int(max_mb * 2**20), clock
        self.page = frozenset(path for _, _, path in stored_files(folder))  # the examples' copies, made at start
        self.finished: Set[str] = set()
        self.incoming = 0  # the Content-Length of uploads being read (reserve): not yet stored, already counted
        self.lock = threading.Lock()

    def used(self) -> int:
        """Bytes stored and reserved."""
        return sum(size for _, size, _ in stored_files(self.folder)) + self.incoming

    def make_room(self, size: int, keep: Iterable[str] = ()) -> None:
        """Remove finished files, then uploads older than PENDING_MAX_AGE_S (oldest first; not ``keep``) until
        ``size`` more bytes fit; StoreFull when they do not."""
        with self.lock:
            files = stored_files(self.folder)
            total = sum(size for _, size, _ in files) + self.incoming
            expired, keep = self.clock() - PENDING_MAX_AGE_S, set(keep) | self.page
            removable = sorted((path not in self.finished, mtime, size, path) for mtime, size, path in files
                               if path not in keep and (path in self.finished or mtime < expired))
            for _, _, bytes_, path in removable:
                if total + size <= self.max_bytes:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                total -= bytes_
                self.finished.discard(path)
            for root, dirs, _ in os.walk(self.folder, topdown=False):  # the folders made per file, now empty
                for name in dirs:
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(root, name))
            if total + size > self.max_bytes:
                raise StoreFull(f'{size / 2**20:.2f} MB more do not fit: the server stores {total / 2**20:.2f} MB of '
                                f'uploads not yet restored and its own files, its bound is {self.max_bytes / 2**20:g} '
                                f'MB (tola-web --max-stored-mb); an upload is kept {PENDING_MAX_AGE_S / 60:g} minutes '
                                'for its restoration: try again later')

    def reserve(self, size: int) -> None:
        """Make room for an upload of ``size`` bytes and count them until ``release``."""
        self.make_room(size)
        with self.lock:
            self.incoming += size

    def release(self, size: int) -> None:
        with self.lock:
            self.incoming -= size

    def save_images(self, images: Dict[str, Optional[np.ndarray]], keep: str = '') -> Dict[str, Optional[str]]:
        """Write each RGB image (None: none) as PNG into the folder (``<sha256>/<name>.png``), room made for them first
        (``keep``: the upload they come from) -> name: path. They are finished: the page has shown them."""
        encoded = {
            name: encode_image(rgb, '.png', name, order='RGB')
            for name, rgb in images.items() if rgb is not None
        }
        paths = {
            name: os.path.join(self.folder,
                               hashlib.sha256(data).hexdigest(), f'{name}.png')
            for name, data in encoded.items()
        }
        new = sum(len(data) for name, data in encoded.items() if not os.path.exists(paths[name]))
        self.make_room(new, [os.path.realpath(keep)])
        for name, data in encoded.items():
            write_file_bytes(paths[name], data)
            with self.lock:
                self.finished.add(paths[name])
        return {name: paths.get(name) for name in images}

    def finish(self, path: str) -> None:
        """The upload ``path`` was restored: it may be removed to make room."""
        with self.lock:
            if os.path.realpath(path) not in self.page:
                self.finished.add(os.path.realpath(path))

    def check_present(self, path: str, name: str) -> None:
        """A ValueError saying why, when the upload ``path`` of this folder was removed to make room."""
        if os.path.dirname(os.path.dirname(os.path.realpath(path))) == self.folder and not os.path.exists(path):
            raise ValueError(f'{name} is no longer on the server: it was removed to make room for newer uploads '
                             f'(the server keeps at most {self.max_bytes / 2**20:g} MB: tola-web --max-stored-mb; an '
                             'upload goes once restored, or after waiting '
                             f'{PENDING_MAX_AGE_S / 60:g} minutes when room is needed); upload it again')


class BoundedHTTP(H11Protocol):
    """uvicorn's HTTP/1.1 connection with bounds of its own (uvicorn has neither a header nor a body timeout: half-open
    requests held 1,500 descriptors): a request's line and headers must arrive within HEADER_TIMEOUT_S of the
    connection or of the previous response, and its body must not pause for BODY_IDLE_TIMEOUT_S while the server
    reads it (each, 408 and closed); at most MAX_CONNECTIONS are open (one more is closed at once)."""

    timer = None
    timer_for = None  # 'headers' (armed once per request) or 'body' (re-armed by each chunk)

    def connection_made(self, transport):
        super().connection_made(transport)
        if len(self.connections) > MAX_CONNECTIONS:
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.timer_for == 'body':
            self._stop_timer()  # a chunk came: the body's idle time starts again
        self._arm()

    def connection_lost(self, exc):
        self._stop_timer()
        super().connection_lost(exc)

    def _waiting_for(self):
        """'headers' or 'body' while the client owes them, else None (answering, or closed)."""
        if self.transport.is_closing():
            return None
        return {h11.IDLE: 'headers', h11.SEND_BODY: 'body'}.get(self.conn.their_state)

    def _arm(self):
        waiting = self._waiting_for()
        if waiting != self.timer_for:
            self._stop_timer()
        if waiting is not None and self.timer is None:
            delay = HEADER_TIMEOUT_S if waiting == 'headers' else BODY_IDLE_TIMEOUT_S
            self.timer, self.timer_for = self.loop.call_later(delay, self._timed_out), waiting

    def _stop_timer(self):
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.timer_for = None

    def _timed_out(self):
        waiting, self.timer, self.timer_for = self.timer_for, None, None
        if waiting != self._waiting_for():
            return
        if waiting == 'body' and self.flow.read_paused:  # the server is not reading (its buffer is full): not idle
            self._arm()
            return
        body = (f'request headers not received within {HEADER_TIMEOUT_S:g} s' if waiting == 'headers' else
                f'request body stalled: nothing received for {BODY_IDLE_TIMEOUT_S:g} s').encode()
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing answered yet: say why
            self.transport.write(b'HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\nconnection: close\r\n'
                                 b'content-length: %d\r\n\r\n%s' % (len(body), body))
        self.transport.close()


def _remove_stale_upload_folders() -> None:
    """Upload folders of tola-web servers whose process is gone (killed before it could clean up)."""
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), f'{UPLOADS_PREFIX}*-*')):
        pid = os.path.basename(folder)[len(UPLOADS_PREFIX):].split('-')[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _own_temp_folder():
    """A new folder for this page's uploads and Gradio's copies of its images, Gradio's temporary folder from now
    on (``GRADIO_TEMP_DIR``: Gradio's app and each component read it when they are made); removed at exit at the
    latest. -> (folder, the previous GRADIO_TEMP_DIR)."""
    _remove_stale_upload_folders()
    folder = tempfile.mkdtemp(prefix=f'{UPLOADS_PREFIX}{os.getpid()}-')
    atexit.register(shutil.rmtree, folder, True)
    previous = os.environ.get('GRADIO_TEMP_DIR')
    os.environ['GRADIO_TEMP_DIR'] = folder
    return folder, previous


def upload_folder(app: gr.Blocks) -> Optional[str]:
    """The folder the page of ``build_app`` stores its uploads in (removed when its server stops)."""
    return getattr(app, 'tola_upload_folder', None)


def launch(app: gr.Blocks, host: str = '127.0.0.1', port: Optional[int] = None, max_file_mb: float = UPLOAD_MAX_MB,
           block: bool = True, max_stored_mb: float = STORED_UPLOADS_MAX_MB, allowed_hosts: Sequence[str] = ()):
    """Serve ``app`` on host:port (port None: 7860 or the next free one) under the names ``host``, LOCAL_NAMES,
    ``allowed_hosts`` and its IP addresses, with uploads limited to ``max_file_mb`` per file and one file's worth per
    request, from the page itself only (``RequestGuard``), everything stored in a folder of its own that holds at most
    ``max_stored_mb`` (``Store``) and is removed when the server stops; connections bounded (``BoundedHTTP``); no
    share link, no server-side rendering (needs Node), API page off. block=False returns after start-up (call
    ``app.close()``, which also removes the uploads). Returns (fastapi app, local url, share url) as
    ``gr.Blocks.launch``."""
    from gradio import http_server
    from starlette.middleware import Middleware
    folder, previous = upload_folder(app), getattr(app, 'tola_previous_temp', None)
    store = getattr(app, 'tola_store', None)
    if folder is None or store is None:
        raise ValueError('launch serves pages made by build_app (they hold their upload folder)')
    store.max_bytes = int(max_stored_mb * 2**20)
    need = store.used() + int(max_file_mb * 2**20)
    if need > store.max_bytes:
        raise ValueError(f'--max-stored-mb {max_stored_mb:g} cannot hold the page\'s own files (the examples: '
                         f'{store.used() / 2**20:.2f} MB) and one upload of --max-file-mb {max_file_mb:g}; give at '
                         f'least {need / 2**20:.2f}')
    os.environ['GRADIO_TEMP_DIR'] = folder  # Gradio's app reads it when launch creates it
    close = app.close

    def close_and_clean(verbose: bool = True) -> None:
        close(verbose)
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get('GRADIO_TEMP_DIR') == folder:
            os.environ.pop('GRADIO_TEMP_DIR')
            if previous is not None:
                os.environ['GRADIO_TEMP_DIR'] = previous

    app.close = close_and_clean
    max_bytes = int(max_file_mb * 2**20)
    hosts = {*LOCAL_NAMES, host, *allowed_hosts}
    try:
        with _bounded_connections(http_server):
            started = app.launch(
                server_name=host, server_port=port, share=False, ssr_mode=False, mcp_server=False,
                max_file_size=max_bytes, show_error=True, quiet=True, inbrowser=False, footer_links=[],
                prevent_thread_lock=True, enable_monitoring=False, css=PAGE_CSS, app_kwargs={
                    'middleware': [Middleware(RequestGuard, max_file_mb=max_file_mb, store=store, hosts=hosts)]
                })
    except BaseException:
        close_and_clean(False)
        raise
    # our own line instead of Gradio's (quiet): its advice to "set share=True in launch()" is for Python users, and
    # this page makes no share link
    reach = 'this machine only' if host in ('127.0.0.1', 'localhost', '::1') else f'every address of {host}'
    say(f'tola-web: serving {app.local_url} ({reach}); Ctrl-C stops it', sys.stdout)
    if block:
        if threading.current_thread() is threading.main_thread():  # SIGTERM stops the server as Ctrl-C does
            signal.signal(signal.SIGTERM, _interrupt)
        try:
            app.block_thread()
        finally:
            app.close()
    return started


@contextlib.contextmanager
def _bounded_connections(http_server):
    """Gradio's servers started within the block speak ``BoundedHTTP`` (Gradio makes uvicorn's Config itself and
    takes no protocol: its Server class is the one place to set it)."""
    plain = http_server.Server

    class Server(plain):

        def __init__(self, config, *args, **kwargs):
            config.http = BoundedHTTP
            super().__init__(config, *args, **kwargs)

    http_server.Server = Server
    try:
        yield
    finally:
        http_server.Server = plain


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
          max_stored_mb: float = STORED_UPLOADS_MAX_MB, allowed_hosts: Sequence[str] = ()) -> gr.Blocks:
    """The body of tola-web: load the merged ``model`` (None: the demo model) as a ``TOLAPipeline`` (where and how it
    runs: the runtime decision, printed and shown on the page), warm it up, build the page and serve it on
    host:port (port None: a free one). Blocks until stopped unless ``block`` is False; returns the app (``.close()``
    stops it)."""
    path = model if model is not None else demo_model_path(say=lambda m: say(f'tola-web: {m}'))
    pipeline = TOLAPipeline.from_merged(path, switches={'precision': precision} if precision else {}, device=device,
                                        backend=backend, color_fix=color_fix, max_windows=max_windows,
                                        max_output_pixels=max_output_megapixels * 1e6)
    say(f'tola-web: {pipeline.describe_runtime()}')
    warm_up(pipeline, detect=True)  # the page restores photos too (its switch): PP-OCRv4's detector loaded now
    demo = is_demo_model(path)  # by what the model is, not by where it lies
    app = build_app(pipeline, detect=detect, demo_model=demo, max_megapixels=max_megapixels, model_name=model
                    or 'the demo model')
    launch(app, host=host, port=port or free_port(host), max_file_mb=max_file_mb, block=block,
           max_stored_mb=max_stored_mb, allowed_hosts=allowed_hosts)
    return app
