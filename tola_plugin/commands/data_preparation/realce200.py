"""RealCE-200 (paper supp. "RealCE-200 Construction") from the RealCE validation split (tools/build_realce200.py).

For every official text annotation (``<root>/<split>/annos/<stem>.txt``, lines ``x1,y1,...,x4,y4,transcription``)
the axis-aligned box of the quadrilateral is cut from the LR (13 mm) and the reference (52 mm) image with identical
coordinates; both crops go on the 512x128 canvas (PIL bicubic) without registration. Candidates are filtered on
transcription length and composition, box size, aspect ratio, sharpness and contrast, de-duplicated by
transcription identity and dHash, and ``count`` of the survivors are drawn with ``seed``; IDs R001.. follow
source order. The filter values are the tool's choices (docs/data.md): the paper names only the categories.
"""
import os
import re
import sys
from typing import Dict, List, Sequence, Tuple

import numpy as np

from tola_plugin.commands.data_preparation.image_checks import hamming, image_stats, sha256_file, write_tsv
from tola_plugin.data.image_io import list_image_files, read_image_file, write_image
from tola_plugin.data.text_labels import ocr_text
from tola_plugin.data.text_line_source import canvas_rgb8
from tola_plugin.text.alphabets import transocr_classes
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.user_text import say

_WS = re.compile(r'\s+')
STAT_KEYS = ['lr_gray_std', 'ref_gray_std', 'lr_laplacian_var', 'ref_laplacian_var', 'ref_dhash']


def parse_annotation(line: str, where: str) -> Tuple[np.ndarray, str]:
    """``(quad (4,2) float, transcription)``; commas inside the transcription are kept. ValueError naming
    ``where`` for a line without 8 numeric coordinates."""
    parts = line.rstrip('\r\n').split(',', 8)
    if len(parts) < 9:
        raise ValueError(f'{where}: expected 8 coordinates and a transcription, got {line.strip()!r}')
    try:
        quad = np.array([float(v) for v in parts[:8]]).reshape(4, 2)
    except ValueError:
        raise ValueError(f'{where}: non-numeric coordinates in {line.strip()!r}') from None
    return quad, parts[8]


def transcription_ok(text: str, lo: int, hi: int, alphabet: set) -> bool:
    """``lo`` <= length <= ``hi`` of the OCR target, not only illegible marks ('#'), every character in
    ``alphabet``."""
    target = ocr_text(text)
    return (lo <= len(target) <= hi and set(target) - {'#'} != set() and all(ch in alphabet for ch in target))


def list_images(split_dir: str, lr_dir: str) -> List[str]:
    """The split's ``valid_list.txt`` (sorted) when it has one, else every image of ``lr_dir``."""
    valid = os.path.join(split_dir, 'valid_list.txt')
    if os.path.isfile(valid):
        with open(valid, encoding='utf-8') as f:
            return sorted(line.strip() for line in f if line.strip())
    return list_image_files(lr_dir)


def collect_candidates(root: str, split: str = 'val', lr_focal: str = '13mm', ref_focal: str = '52mm',
                       anno_encoding: str = 'gbk', min_chars: int = 2, max_chars: int = 24, min_box_width: int = 32,
                       min_box_height: int = 16, aspect: Sequence[float] = (1.0, 8.0), min_ref_sharpness: float = 20.0,
                       min_contrast: float = 10.0) -> List[Dict]:
    """One row per annotation in source order: ``source``, ``line``, ``transcription``, box, crop statistics and
    ``status`` 'candidate' (with its two crops in ``_crops``) or 'rejected' with the first failed filter in
    ``reason``. UsageError when the layout or an annotation file is missing."""
    split_dir = os.path.join(root, split)
    lr_dir, ref_dir = os.path.join(split_dir, lr_focal), os.path.join(split_dir, ref_focal)
    anno_dir = os.path.join(split_dir, 'annos')
    for d in (lr_dir, ref_dir, anno_dir):
        if not os.path.isdir(d):
            raise UsageError(f'{d} not found; expected the RealCE layout <root>/<split>/'
                             f'{{{lr_focal},{ref_focal},annos}}')
    alphabet = set(transocr_classes()[2:-1])
    rows = []
    for name in list_images(split_dir, lr_dir):
        stem = os.path.splitext(name)[0]
        anno = os.path.join(anno_dir, stem + '.txt')
        if not os.path.isfile(anno):
            raise UsageError(f'annotation {anno} for image {name} not found')
        lr_img, ref_img = read_image_file(os.path.join(lr_dir, name)), read_image_file(os.path.join(ref_dir, name))
        with open(anno, encoding=anno_encoding) as f:
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
            if not transcription_ok(text, min_chars, max_chars, alphabet):
                row['reason'] = 'transcription'
                continue
            if w < min_box_width or h < min_box_height:
                row['reason'] = 'box_size'
                continue
            if not aspect[0] <= w / h <= aspect[1]:
                row['reason'] = 'aspect'
                continue
            lr_crop, ref_crop = lr_img[y0:y1, x0:x1], ref_img[y0:y1, x0:x1]
            lr_stats, ref_stats = image_stats(lr_crop), image_stats(ref_crop)
            row.update(lr_gray_std=lr_stats['gray_std'], ref_gray_std=ref_stats['gray_std'],
                       lr_laplacian_var=lr_stats['laplacian_var'], ref_laplacian_var=ref_stats['laplacian_var'],
                       ref_dhash=ref_stats['dhash'])
            if ref_stats['laplacian_var'] < min_ref_sharpness:
                row['reason'] = 'sharpness'
                continue
            if min(lr_stats['gray_std'], ref_stats['gray_std']) < min_contrast:
                row['reason'] = 'contrast'
                continue
            row['status'], row['_crops'] = 'candidate', (lr_crop, ref_crop)
    return rows


def deduplicate(rows: List[Dict], distance: int) -> None:
    """Reject, in place and in order, a candidate whose OCR target repeats a kept one's, or whose reference dHash
    is within ``distance`` (Hamming) of a kept one's."""
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


def build_realce200(root: str, out: str, split: str = 'val', lr_focal: str = '13mm', ref_focal: str = '52mm',
                    anno_encoding: str = 'gbk', count: int = 200, seed: int = 0, min_chars: int = 2,
                    max_chars: int = 24, min_box_width: int = 32, min_box_height: int = 16,
                    aspect: Sequence[float] = (1.0, 8.0), min_ref_sharpness: float = 20.0, min_contrast: float = 10.0,
                    dhash_distance: int = 7) -> int:
    """Write ``out``/lr/Rxxx.png, hr/Rxxx.png, labels.tsv (for PairedTextDataset), manifest.tsv (ID, sources, box,
    transcription, statistics, SHA-256 of both files) and candidates.tsv (every annotation with its decision);
    prints one summary line. -> 0. UsageError when ``out`` is not empty or fewer than ``count`` candidates
    survive."""
    if os.path.isdir(out) and os.listdir(out):
        raise UsageError(f'--out {out} is not empty')
    rows = collect_candidates(root, split, lr_focal, ref_focal, anno_encoding, min_chars, max_chars, min_box_width,
                              min_box_height, aspect, min_ref_sharpness, min_contrast)
    deduplicate(rows, dhash_distance)
    pool = [i for i, r in enumerate(rows) if r['status'] == 'candidate']
    if len(pool) < count:
        raise UsageError(f'only {len(pool)} candidates survive the filters, --count is {count}; '
                         f'see the reasons with a smaller --count')
    chosen = sorted(np.random.Generator(np.random.PCG64(seed)).choice(pool, count, replace=False).tolist())
    for i in pool:
        rows[i]['status'], rows[i]['reason'] = 'not_drawn', ''
    os.makedirs(os.path.join(out, 'lr'), exist_ok=True)
    os.makedirs(os.path.join(out, 'hr'), exist_ok=True)
    width = max(3, len(str(count)))
    records = []
    for n, i in enumerate(chosen, start=1):
        row = rows[i]
        rid = f'R{n:0{width}d}'
        lr_crop, ref_crop = row.pop('_crops')
        for sub, crop in (('lr', lr_crop), ('hr', ref_crop)):
            write_image(os.path.join(out, sub, rid + '.png'), canvas_rgb8(crop), order='RGB')
        row.update(status='selected', id=rid, file=rid + '.png',
                   sha256_lr=sha256_file(os.path.join(out, 'lr', rid + '.png')),
                   sha256_hr=sha256_file(os.path.join(out, 'hr', rid + '.png')))
        records.append(row)
    with open(os.path.join(out, 'labels.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(f'{r["file"]}\t{r["transcription"]}\n' for r in records)
    for r in rows:
        r.pop('_crops', None)
        if 'ref_dhash' in r:
            r['ref_dhash'] = f'{r["ref_dhash"]:016x}'
    write_tsv(
        os.path.join(out, 'manifest.tsv'),
        ['id', 'file', 'transcription', 'source', 'line', 'lr_source', 'ref_source', 'x0', 'y0', 'x1', 'y1'] +
        STAT_KEYS + ['sha256_lr', 'sha256_hr'], [
            dict(r, lr_source=f'{split}/{lr_focal}/{r["source"]}', ref_source=f'{split}/{ref_focal}/{r["source"]}')
            for r in records
        ])
    write_tsv(
        os.path.join(out, 'candidates.tsv'),
        ['source', 'line', 'transcription', 'status', 'reason', 'x0', 'y0', 'x1', 'y1'] + STAT_KEYS, rows)
    say(f'{len(rows)} annotations, {len(pool)} candidates after filters, wrote {len(records)} pairs to {out}',
        sys.stdout)
    return 0
