#!/usr/bin/env python
"""Build RealCE-200 (paper supp. "RealCE-200 Construction") from the RealCE validation split.

For every official text annotation (``<root>/<split>/annos/<stem>.txt``, GBK, lines
``x1,y1,...,x4,y4,transcription``) the axis-aligned box of the quadrilateral is cut from the 13 mm
(LR) and the 52 mm (reference) image with identical coordinates and both crops are resized
(PIL bicubic) to 512x128 without registration. Candidates are filtered on transcription length and
composition, box size, aspect ratio, sharpness and contrast, de-duplicated by transcription identity
and dHash, and --count of the survivors are drawn with --seed; IDs R001.. follow source order.

The paper names the filter categories but not their values: the defaults below are this tool's
choices (documented in docs/data.md); contrast reuses RT50's lower gray-std bound and the dHash
distance RT50's threshold.

Outputs in --out: lr/Rxxx.png, hr/Rxxx.png, labels.tsv (for PairedTextDataset), manifest.tsv
(ID, sources, box, transcription, statistics, SHA-256 of both files) and candidates.tsv (every
annotation with its decision).

Example:
    python tools/build_realce200.py --root data/Real-CE --out data/RealCE-200
"""
import argparse
import os
import re

import numpy as np

from tola_plugin.data.image_checks import hamming, image_stats, sha256_file, write_png, write_tsv
from tola_plugin.data.image_io import list_image_files, read_image_file
from tola_plugin.data.text_labels import ocr_text
from tola_plugin.data.text_line_source import canvas_rgb8
from tola_plugin.text.alphabets import transocr_classes
from tola_plugin.utils.cli_errors import UsageError, run_tool

_WS = re.compile(r'\s+')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--root', required=True, help='RealCE root holding <split>/{13mm,52mm,annos}')
    p.add_argument('--out', required=True, help='output folder (must be empty or absent)')
    p.add_argument('--split', default='val', help='RealCE split folder [val]')
    p.add_argument('--lr-focal', default='13mm', help='LR focal folder [13mm]')
    p.add_argument('--ref-focal', default='52mm', help='reference focal folder [52mm]')
    p.add_argument('--anno-encoding', default='gbk', help='annotation file encoding [gbk, as RealCE val]')
    p.add_argument('--count', type=int, default=200, help='pairs to keep [200]')
    p.add_argument('--seed', type=int, default=0, help='seed of the draw among surviving candidates [0]')
    p.add_argument('--min-chars', type=int, default=2, help='transcription length lower bound [2]')
    p.add_argument('--max-chars', type=int, default=24, help='upper bound [24 = IDM/TransOCR target room]')
    p.add_argument('--min-box-width', type=int, default=32, help='box width lower bound, pixels [32]')
    p.add_argument('--min-box-height', type=int, default=16, help='box height lower bound, pixels [16]')
    p.add_argument('--aspect', type=float, nargs=2, default=[1.0, 8.0], metavar=('LO', 'HI'),
                   help='box width/height range, inclusive [1 8: DiffTSR input rule]')
    p.add_argument('--min-ref-sharpness', type=float, default=20.0,
                   help='reference crop Laplacian variance lower bound on the 512x128 gray canvas [20]')
    p.add_argument('--min-contrast', type=float, default=10.0,
                   help='gray std lower bound of both crops on the canvas [10, RT50\'s bound]')
    p.add_argument('--dhash-distance', type=int, default=7,
                   help='reference crops within this dHash Hamming distance of a kept one are duplicates [7]')
    return p.parse_args(argv)


def parse_annotation(line: str, where: str):
    """``(quad (4,2) float, transcription)``; commas inside the transcription are kept."""
    parts = line.rstrip('\r\n').split(',', 8)
    if len(parts) < 9:
        raise ValueError(f'{where}: expected 8 coordinates and a transcription, got {line.strip()!r}')
    try:
        quad = np.array([float(v) for v in parts[:8]]).reshape(4, 2)
    except ValueError:
        raise ValueError(f'{where}: non-numeric coordinates in {line.strip()!r}') from None
    return quad, parts[8]


def transcription_ok(text: str, lo: int, hi: int, alphabet: set) -> bool:
    target = ocr_text(text)
    return (lo <= len(target) <= hi and set(target) - {'#'} != set() and all(ch in alphabet for ch in target))


def list_images(split_dir: str, lr_dir: str):
    valid = os.path.join(split_dir, 'valid_list.txt')
    if os.path.isfile(valid):
        with open(valid, encoding='utf-8') as f:
            return sorted(line.strip() for line in f if line.strip())
    return list_image_files(lr_dir)


def collect_candidates(args):
    split_dir = os.path.join(args.root, args.split)
    lr_dir, ref_dir = os.path.join(split_dir, args.lr_focal), os.path.join(split_dir, args.ref_focal)
    anno_dir = os.path.join(split_dir, 'annos')
    for d in (lr_dir, ref_dir, anno_dir):
        if not os.path.isdir(d):
            raise UsageError(f'{d} not found; expected the RealCE layout <root>/<split>/'
                             f'{{{args.lr_focal},{args.ref_focal},annos}}')
    alphabet = set(transocr_classes()[2:-1])
    rows = []
    for name in list_images(split_dir, lr_dir):
        stem = os.path.splitext(name)[0]
        anno = os.path.join(anno_dir, stem + '.txt')
        if not os.path.isfile(anno):
            raise UsageError(f'annotation {anno} for image {name} not found')
        lr_img, ref_img = read_image_file(os.path.join(lr_dir, name)), read_image_file(os.path.join(ref_dir, name))
        with open(anno, encoding=args.anno_encoding) as f:
            lines = [line for line in f if line.strip()]
        for j, line in enumerate(lines):
            quad, raw = parse_annotation(line, f'{anno}:{j + 1}')
            text = _WS.sub('', raw)
            row = {'source': name, 'line': j + 1, 'transcription': text, 'status': 'rejected', 'reason': ''}
            rows.append(row)
            if lr_img.shape != ref_img.shape:
                row['reason'] = 'image_size_mismatch'
                continue
            h_img, w_img = lr_img.shape[:2]
            x0, y0 = np.floor(quad.min(0)).astype(int)
            x1, y1 = np.ceil(quad.max(0)).astype(int)
            x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w_img), min(y1, h_img)
            w, h = x1 - x0, y1 - y0
            row.update(x0=x0, y0=y0, x1=x1, y1=y1)
            if not transcription_ok(text, args.min_chars, args.max_chars, alphabet):
                row['reason'] = 'transcription'
                continue
            if w < args.min_box_width or h < args.min_box_height:
                row['reason'] = 'box_size'
                continue
            if not args.aspect[0] <= w / h <= args.aspect[1]:
                row['reason'] = 'aspect'
                continue
            lr_crop, ref_crop = lr_img[y0:y1, x0:x1], ref_img[y0:y1, x0:x1]
            lr_stats, ref_stats = image_stats(lr_crop), image_stats(ref_crop)
            row.update(lr_gray_std=lr_stats['gray_std'], ref_gray_std=ref_stats['gray_std'],
                       lr_laplacian_var=lr_stats['laplacian_var'], ref_laplacian_var=ref_stats['laplacian_var'],
                       ref_dhash=ref_stats['dhash'])
            if ref_stats['laplacian_var'] < args.min_ref_sharpness:
                row['reason'] = 'sharpness'
                continue
            if min(lr_stats['gray_std'], ref_stats['gray_std']) < args.min_contrast:
                row['reason'] = 'contrast'
                continue
            row['status'], row['_crops'] = 'candidate', (lr_crop, ref_crop)
    return rows


def deduplicate(rows, distance: int):
    seen_text, kept_hashes = {}, []
    for row in rows:
        if row['status'] != 'candidate':
            continue
        key = ocr_text(row['transcription'])
        if key in seen_text:
            row['status'], row['reason'] = 'rejected', f'duplicate_text_of:{seen_text[key]}'
            continue
        near = [src for h, src in kept_hashes if hamming(h, row['ref_dhash']) <= distance]
        if near:
            row['status'], row['reason'] = 'rejected', f'near_duplicate_of:{near[0]}'
            continue
        seen_text[key] = f'{row["source"]}#{row["line"]}'
        kept_hashes.append((row['ref_dhash'], f'{row["source"]}#{row["line"]}'))


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.path.isdir(args.out) and os.listdir(args.out):
        raise UsageError(f'--out {args.out} is not empty')
    rows = collect_candidates(args)
    deduplicate(rows, args.dhash_distance)
    pool = [i for i, r in enumerate(rows) if r['status'] == 'candidate']
    if len(pool) < args.count:
        raise UsageError(f'only {len(pool)} candidates survive the filters, --count is {args.count}; '
                         f'see the reasons with a smaller --count')
    chosen = sorted(np.random.Generator(np.random.PCG64(args.seed)).choice(pool, args.count, replace=False).tolist())
    for i in pool:
        rows[i]['status'], rows[i]['reason'] = 'not_drawn', ''
    os.makedirs(os.path.join(args.out, 'lr'), exist_ok=True)
    os.makedirs(os.path.join(args.out, 'hr'), exist_ok=True)
    width = max(3, len(str(args.count)))
    records = []
    for n, i in enumerate(chosen, start=1):
        row = rows[i]
        rid = f'R{n:0{width}d}'
        lr_crop, ref_crop = row.pop('_crops')
        for sub, crop in (('lr', lr_crop), ('hr', ref_crop)):
            write_png(os.path.join(args.out, sub, rid + '.png'), canvas_rgb8(crop))
        row.update(status='selected', id=rid, file=rid + '.png',
                   sha256_lr=sha256_file(os.path.join(args.out, 'lr', rid + '.png')),
                   sha256_hr=sha256_file(os.path.join(args.out, 'hr', rid + '.png')))
        records.append(row)
    with open(os.path.join(args.out, 'labels.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(f'{r["file"]}\t{r["transcription"]}\n' for r in records)
    for r in rows:
        r.pop('_crops', None)
        if 'ref_dhash' in r:
            r['ref_dhash'] = f'{r["ref_dhash"]:016x}'
    stats = ['lr_gray_std', 'ref_gray_std', 'lr_laplacian_var', 'ref_laplacian_var', 'ref_dhash']
    write_tsv(
        os.path.join(args.out, 'manifest.tsv'),
        ['id', 'file', 'transcription', 'source', 'line', 'lr_source', 'ref_source', 'x0', 'y0', 'x1', 'y1'] + stats +
        ['sha256_lr', 'sha256_hr'], [
            dict(r, lr_source=f'{args.split}/{args.lr_focal}/{r["source"]}',
                 ref_source=f'{args.split}/{args.ref_focal}/{r["source"]}') for r in records
        ])
    write_tsv(
        os.path.join(args.out, 'candidates.tsv'),
        ['source', 'line', 'transcription', 'status', 'reason', 'x0', 'y0', 'x1', 'y1'] + stats, rows)
    print(f'{len(rows)} annotations, {len(pool)} candidates after filters, wrote {len(records)} pairs to {args.out}')
    return 0


if __name__ == '__main__':
    run_tool(main)
