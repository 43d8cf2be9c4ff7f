#!/usr/bin/env python
"""Write low-resolution samples for ``tola-infer``: text lines of aspect 1:1 to 1:20 (lines/, transcriptions in
lines/labels.tsv) and a photo with several lines at different angles (photo.png, its lines in photo.txt), rendered
here and bicubic-downsampled.

    python tools/make_restore_samples.py --out demo_data/restore_samples
    tola-infer -i demo_data/restore_samples/lines -o results/restore_lines
    tola-infer -i demo_data/restore_samples/photo.png -o results/restore_photo --detect

Same seed, same bytes. docs/restore.md shows what TOLA makes of them (tools/plot_restore_figure.py).
"""
import argparse
import os
import sys

import cv2

from tola_plugin.data.photo_render import PhotoLine, render_photo
from tola_plugin.data.text_render import TextLineRenderer
from tola_plugin.utils.cli_errors import run_tool

# (width : height of the HR canvas, text); the canvas is 128 rows high
LINES = ((1, '文字'), (2, '超分'), (4, 'Text2025'), (10, '一步文本超分辨率TOLA'), (20, 'AnyAspectRatioWorks0123456789'))
# the HR photo is 720 x 960; its lines are 40-56 pixels high before the downsampling
PHOTO_LINES = (PhotoLine('Restore text', 0, (300, 110), 56), PhotoLine('文本图像超分', 10, (520, 300), 60),
               PhotoLine('ONE STEP 2025', -8, (400, 500), 52), PhotoLine('TOLA', 28, (800, 620), 48))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument('--out', required=True, help='output folder (lines/, photo.png, photo.txt); must not exist')
    parser.add_argument('--scale', type=int, default=4, help='line downsampling factor (4; the photo: 3)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--font', help='font file (default: the first fontconfig Chinese font covering a text)')
    args = parser.parse_args(argv)
    if os.path.exists(args.out):
        raise ValueError(f'{args.out} already exists; give a new folder')
    os.makedirs(os.path.join(args.out, 'lines'))
    labels = []
    for index, (aspect, text) in enumerate(LINES):
        renderer = TextLineRenderer([args.font] if args.font else None, seed=args.seed, height=128, width=128 * aspect)
        rgb, _, _ = renderer.render(index, text)
        name = f'line_1x{aspect}.png'
        lr = cv2.resize(rgb, (128 * aspect // args.scale, 128 // args.scale), interpolation=cv2.INTER_CUBIC)
        cv2.imwrite(os.path.join(args.out, 'lines', name), cv2.cvtColor(lr, cv2.COLOR_RGB2BGR))
        labels.append(f'{name}\t{text}\n')
    photo, _, _ = render_photo(PHOTO_LINES, height=720, width=960, seed=args.seed, font_path=args.font)
    cv2.imwrite(
        os.path.join(args.out, 'photo.png'),
        cv2.cvtColor(cv2.resize(photo, (320, 240), interpolation=cv2.INTER_CUBIC), cv2.COLOR_RGB2BGR))
    with open(os.path.join(args.out, 'lines', 'labels.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(labels)
    with open(os.path.join(args.out, 'photo.txt'), 'w', encoding='utf-8') as f:
        f.writelines(f'{line.text}\n' for line in PHOTO_LINES)
    print(f'wrote {len(LINES)} lines and a photo to {args.out}')
    return 0


if __name__ == '__main__':
    run_tool(lambda: main(sys.argv[1:]))
