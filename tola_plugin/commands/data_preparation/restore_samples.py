"""Low-resolution samples for ``tola-infer`` (tools/make_restore_samples.py, docs/restore.md): text lines of aspect
1:1 to 1:20 and a photo with several lines at different angles, rendered here and bicubic-downsampled. Same seed,
same bytes.
"""
import os
import sys
from typing import Optional

import cv2

from tola_plugin.commands.data_preparation.photo_render import PhotoLine, render_photo
from tola_plugin.data.image_io import write_image
from tola_plugin.data.text_render import TextLineRenderer
from tola_plugin.utils.user_text import say

# (width : height of the HR canvas, text); the canvas is 128 rows high
LINES = ((1, '文字'), (2, '超分'), (4, 'Text2025'), (10, '一步文本超分辨率TOLA'), (20, 'AnyAspectRatioWorks0123456789'))
# the HR photo is 720 x 960; its lines are 40-56 pixels high before the downsampling
PHOTO_LINES = (PhotoLine('Restore text', 0, (300, 110), 56), PhotoLine('文本图像超分', 10, (520, 300), 60),
               PhotoLine('ONE STEP 2025', -8, (400, 500), 52), PhotoLine('TOLA', 28, (800, 620), 48))


def write_restore_samples(out: str, scale: int = 4, seed: int = 0, font: Optional[str] = None) -> int:
    """Write ``out``/lines/line_1x<aspect>.png (``LINES`` downsampled by ``scale``) with lines/labels.tsv, and
    ``out``/photo.png (``PHOTO_LINES`` on a 720x960 photo, downsampled x3 to 240x320) with photo.txt (its texts).
    ``font``: a font file (default: the first fontconfig Chinese font covering a text). Prints one line; -> 0.
    ValueError when ``out`` exists."""
    if os.path.exists(out):
        raise ValueError(f'{out} already exists; give a new folder')
    os.makedirs(os.path.join(out, 'lines'))
    labels = []
    for index, (aspect, text) in enumerate(LINES):
        renderer = TextLineRenderer([font] if font else None, seed=seed, height=128, width=128 * aspect)
        rgb, _, _ = renderer.render(index, text)
        name = f'line_1x{aspect}.png'
        lr = cv2.resize(rgb, (128 * aspect // scale, 128 // scale), interpolation=cv2.INTER_CUBIC)
        write_image(os.path.join(out, 'lines', name), lr, order='RGB')
        labels.append(f'{name}\t{text}\n')
    photo, _, _ = render_photo(PHOTO_LINES, height=720, width=960, seed=seed, font_path=font)
    write_image(
        os.path.join(out, 'photo.png'), cv2.resize(photo, (320, 240), interpolation=cv2.INTER_CUBIC), order='RGB')
    with open(os.path.join(out, 'lines', 'labels.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(labels)
    with open(os.path.join(out, 'photo.txt'), 'w', encoding='utf-8') as f:
        f.writelines(f'{line.text}\n' for line in PHOTO_LINES)
    say(f'wrote {len(LINES)} lines and a photo to {out}', sys.stdout)
    return 0
