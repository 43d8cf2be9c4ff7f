"""The web page of ``tola-web`` (docs/web.md): upload, paste or pick a text image, see it restored by a
``TOLAPipeline`` next to the input, with the text prior, PP-OCRv4's reading before and after, and the time taken.

    page = build_app(TOLAPipeline.from_merged(path))   # the page's switch: auto, one text line, or a photo
    server = launch(page, port=7860)                   # tola_plugin.web.server

``restore_upload`` does the work of one request (read and check the file, restore, draw the detected lines) and is
plain Python, so it is tested without a browser; ``build_app`` lays it out with Gradio. Names shown on the page are
text, never Markdown (``user_text.markdown_text``).
"""
import os
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import cv2
import gradio as gr
import numpy as np

from tola_plugin.data.image_io import ImageTooLargeError, read_image_file
from tola_plugin.inference.color_fix import COLOR_FIXES, check_color_fix
from tola_plugin.inference.image_kind import AUTO_REASONS, KINDS, check_kind, is_photo
from tola_plugin.inference.pipeline import Restoration, TOLAPipeline
from tola_plugin.utils.progress import step_notes
from tola_plugin.utils.user_text import markdown_text
from tola_plugin.web.examples import example_paths
from tola_plugin.web.uploads import Store, own_temp_folder

# The page's own bounds, below the tools' (tola-infer's image budget is data.image_io.DEFAULT_MAX_PIXELS, 64 MP)
UPLOAD_MAX_MEGAPIXELS = 4.0  # an uploaded image with more pixels is refused (CPU time grows with the pixels)
TABLE_HEADERS = ['line', 'text prior (TransOCR)', 'prior confidence', 'PP-OCRv4 before', 'PP-OCRv4 after']
IMAGE_HEIGHT = 220  # display height (CSS pixels) of the input and restored images
OVERLAY_COLOUR = (255, 64, 0)  # RGB of the detected-line outlines
# input and output fill the same box, so a 32-row input is seen next to its 128-row restoration; the input's pixels
# stay visible as blocks (no smoothing that would flatter it)
PAGE_CSS = ('#tola-input img, #tola-restored img {width: 100%; height: 100%; object-fit: contain;} '
            '#tola-input img {image-rendering: pixelated;}')
DEMO_NOTE = ('**Demo model.** This page serves a model of the small demo backbone (a tiny demo backbone trained in '
             'this repository on rendered lines, adapted with TOLA; docs/demo_backbone.md), not the paper\'s weights: '
             "it shows the pipeline, not TOLA's quality. Give `--model` a merged model of the official weights for "
             'real restorations.')


@dataclass
class WebPage:
    """A page of ``build_app``: Gradio's ``blocks``, the ``folder`` its uploads and shown images go to (Gradio's
    temporary folder from then on) with its bound (``store``), and the GRADIO_TEMP_DIR before it (given back when its
    server stops)."""
    blocks: gr.Blocks
    folder: str
    store: Store
    previous_temp: Optional[str]


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
              model_name: str = '') -> WebPage:
    """The demo page around ``pipeline``: an input (upload, paste, or an example: ``examples`` paths, default
    ``example_paths()``), a visible switch of what the image is (auto, one text line, a photo: ``restore_upload``;
    ``detect`` starts it at photo, else at auto), the restored output beside it (and a photo's detected lines), the
    text table and a status line that also shows errors. demo_model: show DEMO_NOTE. model_name: shown in the
    header."""
    examples = example_paths() if examples is None else list(examples)
    folder, previous = own_temp_folder()  # before any component: each keeps the folder it was built with
    stores = []  # the page's Store, made once the examples' copies are in the folder (they are the page's own files)

    def run(payload, color_fix, kind, progress=gr.Progress()):
        return restore_request(pipeline, stores[0], payload, color_fix, kind, max_megapixels, progress)

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
    stores.append(Store(folder))
    return WebPage(app, folder, stores[0], previous)


def restore_request(pipeline: TOLAPipeline, store: Store, payload, color_fix: str, kind: str,
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
