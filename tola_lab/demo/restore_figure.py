"""The figures of docs/restore.md (tools/plot_restore_figure.py): for the text lines of several aspects of
tools/make_restore_samples.py, the input | the input stretched to 128x512 and restored (DiffTSR's and the old tool's
route) | restored with its aspect kept (TOLAPipeline); then the photo with the lines PP-OCRv4 found | the photo
restored in place (``plot_restore_figure``). And before | after for the real lines of tola_plugin/assets/samples and the
photo, with PP-OCRv4's readings and why a line was left out (``plot_samples_before_after``). The PNGs are
palette-quantised to stay small (docs/ figures are committed).
"""
import os
import sys
from typing import Optional

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from tola_plugin.data.image_io import list_image_files, read_image_file, write_pil_image
from tola_plugin.data.text_line_source import CANVAS_H, CANVAS_W, canvas_rgb8
from tola_plugin.data.text_render import system_cjk_fonts
from tola_plugin.inference.line_geometry import resize_rgb
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.utils.user_text import say

ROW_H = 64  # display height of a line row (half the canvas)
LABEL_W = 190
GAP = 6
PHOTO_W = 620  # display width of each photo
SAMPLE_W = 512  # display width of a sample line (their own: 512x128)


def _font(size: int):
    """The first system CJK font at ``size`` pixels (PIL's default font without one)."""
    fonts = system_cjk_fonts()
    return ImageFont.truetype(fonts[0], size) if fonts else ImageFont.load_default(size)


def _row(image: np.ndarray, label: str, width: int, font) -> np.ndarray:
    """A white strip ``width`` wide: ``label`` on the left, ``image`` (scaled to ROW_H rows) after it."""
    shown = resize_rgb(image, ROW_H, max(1, round(image.shape[1] * ROW_H / image.shape[0])))
    canvas = Image.new('RGB', (width, ROW_H + GAP), 'white')
    canvas.paste(Image.fromarray(shown), (LABEL_W, 0))
    ImageDraw.Draw(canvas).multiline_text((4, 4), label, fill=(0, 0, 0), font=font, spacing=2)
    return np.asarray(canvas)


def _write(out: str, figure: np.ndarray, colours: int = 128) -> int:
    """``figure`` -> the palette PNG ``out`` (``colours`` colours); prints its size. -> 0."""
    palette = Image.fromarray(figure).quantize(colors=colours, method=Image.Quantize.MEDIANCUT)
    write_pil_image(out, palette, optimize=True)
    say(f'wrote {out} ({figure.shape[1]}x{figure.shape[0]}, {os.path.getsize(out) / 1024:.0f} KB)', sys.stdout)
    return 0


def _fit(image: np.ndarray, width: int) -> np.ndarray:
    """``image`` scaled to ``width`` columns, aspect kept."""
    return resize_rgb(image, max(1, round(image.shape[0] * width / image.shape[1])), width)


def plot_restore_figure(samples: str, out: str, model: Optional[str] = None, device: str = 'cpu') -> int:
    """Restore the samples folder ``samples`` (lines/, photo.png) with the merged model ``model`` (default: the demo
    model, shipped with the package) on ``device`` and write the figure to the PNG ``out``; prints its size. -> 0.
    FileNotFoundError when the samples are incomplete."""
    line_dir, photo_path = os.path.join(samples, 'lines'), os.path.join(samples, 'photo.png')
    if not os.path.isdir(line_dir) or not os.path.isfile(photo_path):
        raise FileNotFoundError(f'{samples} lacks lines/ or photo.png; write the samples with '
                                f'tools/make_restore_samples.py')
    pipe = TOLAPipeline.from_merged(model).to(device)
    font, small = _font(15), _font(13)
    names = sorted(list_image_files(line_dir), key=lambda n: int(n.rsplit('x', 1)[1].split('.')[0]))
    lines = [read_image_file(os.path.join(line_dir, n), order='RGB') for n in names]
    ours = pipe(lines, names=names)
    stretched = pipe([canvas_rgb8(img, order='RGB') for img in lines], names=names)
    width = LABEL_W + max(
        max(r.image.shape[1] for r in ours) * ROW_H // CANVAS_H, CANVAS_W * ROW_H // CANVAS_H, 2 * PHOTO_W + GAP)
    rows = []
    for name, img, own, squeezed in zip(names, lines, ours, stretched):
        aspect = name.rsplit('_', 1)[1].split('.')[0].replace('x', ':')
        rows.append(_row(img, f'input {aspect}\n{img.shape[0]}x{img.shape[1]}', width, font))
        rows.append(_row(squeezed.image, 'stretched to\n128x512', width, small))
        rows.append(
            _row(own.image, f'ours {own.image.shape[0]}x{own.image.shape[1]}\n'
                 f'prior conf {own.lines[0].prior_confidence:.2f}', width, small))
        rows.append(np.full((GAP * 2, width, 3), 255, np.uint8))
    photo = read_image_file(photo_path, order='RGB')
    result = pipe(photo, detect=True)  # as tola-infer --detect: the lines that read as well restored are pasted
    found = resize_rgb(photo, *result.image.shape[:2]).copy()
    sy, sx = result.image.shape[0] / photo.shape[0], result.image.shape[1] / photo.shape[1]
    for line in result.lines:
        quad = (np.float32(line.polygon) + 0.5) * np.float32([sx, sy]) - 0.5
        cv2.polylines(found, [np.round(quad).astype(np.int32)], True, (220, 30, 30), 2)
    left, right = _fit(found, PHOTO_W), _fit(result.image, PHOTO_W)
    header = Image.new('RGB', (width, 24), 'white')
    ImageDraw.Draw(header).text((4, 4), f'photo {photo.shape[0]}x{photo.shape[1]}: {len(result.lines)} lines found '
                                f'(PP-OCRv4)  |  restored in place, x{result.outscale:.2f}', fill=(0, 0, 0), font=font)
    bottom = np.full((left.shape[0], width, 3), 255, np.uint8)
    bottom[:, :PHOTO_W], bottom[:, PHOTO_W + GAP:2 * PHOTO_W + GAP] = left, right
    figure = np.concatenate(rows + [np.asarray(header), bottom])
    return _write(out, figure)


def _reading(line) -> str:
    return f'{line.text_before!r} ({line.confidence_before:.2f}) -> {line.text_after!r} ({line.confidence_after:.2f})'


def plot_samples_before_after(samples: str, out: str, model: Optional[str] = None, device: str = 'cpu') -> int:
    """The figure docs/restore.md's "Samples and figure" shows: each real low-resolution line of the assets' samples,
    before | after as tola-infer restores it (its defaults), with PP-OCRv4's readings and the label; then the photo of
    ``samples`` (tools/make_restore_samples.py) before (its lines outlined: green pasted, red left as they were) |
    after | after with every line pasted (``paste='all'``), and why each line left out was. Written to the PNG ``out``,
    palette-quantised; prints its size. -> 0."""
    from tola_plugin.assets.samples import sample_labels, sample_paths
    photo_path = os.path.join(samples, 'photo.png')
    if not os.path.isfile(photo_path):
        raise FileNotFoundError(f'{samples} lacks photo.png; write the samples with tools/make_restore_samples.py')
    pipe = TOLAPipeline.from_merged(model).to(device)
    font, labels, paths = _font(14), sample_labels(), sample_paths()
    results = pipe(paths, recognize=True)  # names: the files' (the noise seeds tola-infer draws)
    width = 2 * SAMPLE_W + GAP
    rows = []
    for path, result in zip(paths, results):
        name = os.path.basename(path)
        before, after = _fit(read_image_file(path, order='RGB'), SAMPLE_W), result.image
        pair = np.full((before.shape[0], width, 3), 255, np.uint8)
        pair[:, :SAMPLE_W], pair[:, SAMPLE_W + GAP:] = before, resize_rgb(after, *before.shape[:2])
        caption = Image.new('RGB', (width, 22), 'white')
        ImageDraw.Draw(caption).text((2, 2), f'{name}  label {labels[name]!r}  PP-OCRv4: {_reading(result.lines[0])}',
                                     fill=(0, 0, 0), font=font)
        rows += [np.asarray(caption), pair, np.full((GAP, width, 3), 255, np.uint8)]
    photo = read_image_file(photo_path, order='RGB')
    result = pipe(photo, detect=True)  # as tola-infer --detect (--paste checked)
    pipe.paste = 'all'
    panel = (width - 2 * GAP) // 3
    found, scale = _fit(photo, panel).copy(), panel / photo.shape[1]
    for line in result.lines:
        quad = np.round((np.float32(line.polygon) + 0.5) * scale - 0.5).astype(np.int32)
        cv2.polylines(found, [quad], True, (30, 160, 30) if line.pasted else (220, 30, 30), 2)
    bottom = np.full((found.shape[0], width, 3), 255, np.uint8)
    for k, image in enumerate((found, _fit(result.image, panel), _fit(pipe(photo, detect=True).image, panel))):
        bottom[:, k * (panel + GAP):k * (panel + GAP) + panel] = image
    notes = [
        f'photo.png {photo.shape[1]}x{photo.shape[0]}: before (lines found: green pasted, red left) | after '
        '(--paste checked, the default) | after --paste all (every line)'
    ]
    notes += [
        f'{_reading(line)}: ' + ('pasted' if line.pasted else f'left: {line.not_pasted_because}')
        for line in result.lines
    ]
    caption = Image.new('RGB', (width, 20 * len(notes) + 4), 'white')
    ImageDraw.Draw(caption).multiline_text((2, 2), '\n'.join(notes), fill=(0, 0, 0), font=font, spacing=5)
    figure = np.concatenate(rows + [np.asarray(caption), bottom])
    return _write(out, figure, colours=256)
