"""The figure of docs/restore.md (tools/plot_restore_figure.py): for the text lines of several aspects of
tools/make_restore_samples.py, the input | the input stretched to 128x512 and restored (DiffTSR's and the old tool's
route) | restored with its aspect kept (TOLAPipeline); then the photo with the lines PP-OCRv4 found | the photo
restored in place. The PNG is palette-quantised to stay small (docs/ figures are committed).
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
    write_pil_image(out, Image.fromarray(figure).quantize(colors=128, method=Image.Quantize.MEDIANCUT), optimize=True)
    say(f'wrote {out} ({figure.shape[1]}x{figure.shape[0]}, {os.path.getsize(out) / 1024:.0f} KB)', sys.stdout)
    return 0
