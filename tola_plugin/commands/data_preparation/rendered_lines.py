"""A set of rendered text lines written to disk (tools/render_text.py): PNGs plus a labels TSV and/or a FudanVI
LMDB, optionally bicubic-downsampled LR copies for paired baselines. Same seed, same bytes (``TextLineRenderer``).
"""
import os
import sys
from typing import List, Optional, Sequence

import cv2
from tqdm import tqdm

from tola_plugin.data.fudanvi_lmdb import write_fudanvi_lmdb
from tola_plugin.data.image_io import encode_image, write_image
from tola_plugin.data.text_render import DEFAULT_CATEGORY_PROBS, TextLineRenderer
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.user_text import say


def read_texts(path: str, num: int) -> List[str]:
    """The non-empty lines of the UTF-8 file ``path`` (transcriptions used in order). UsageError when it has fewer
    than ``num``."""
    with open(path, encoding='utf-8') as f:
        texts = [line.rstrip('\n') for line in f if line.strip()]
    if len(texts) < num:
        raise UsageError(f'{path} has {len(texts)} non-empty lines, fewer than --num {num}')
    return texts


def write_rendered_lines(num: int, seed: int = 0, out: Optional[str] = None, labels: Optional[str] = None,
                         lmdb: Optional[str] = None, lq_out: Optional[str] = None, lq_scale: int = 4,
                         fonts: Optional[Sequence[str]] = None, texts: Optional[str] = None,
                         category_probs: Sequence[float] = DEFAULT_CATEGORY_PROBS, chinese_chars: Optional[str] = None,
                         height: int = 128, width: int = 512, image_format: str = 'png') -> int:
    """Render ``num`` lines (height x width RGB) and write them: ``out``/000001.png... with the labels TSV
    ``labels`` (default ``out``/labels.tsv), ``lq_out`` (the same names downsampled by ``lq_scale``, bicubic) and/or
    the FudanVI LMDB ``lmdb`` (images encoded as ``image_format``, which must not exist yet). ``texts``: a UTF-8 file
    of transcriptions used in order instead of random text. Prints one line; -> 0."""
    text_list = read_texts(texts, num) if texts else None
    renderer = TextLineRenderer(fonts, seed=seed, category_probs=category_probs, height=height, width=width,
                                chinese_chars=chinese_chars)
    for folder in (out, lq_out):
        if folder:
            os.makedirs(folder, exist_ok=True)
    label_lines, encoded = [], []
    for i in tqdm(range(num), desc='render', disable=not sys.stderr.isatty()):
        rgb, text, _ = renderer.render(i, text_list[i] if text_list else None)
        name = f'{i + 1:06d}.png'
        if out:
            write_image(os.path.join(out, name), rgb, order='RGB')
            label_lines.append(f'{name}\t{text}\n')
        if lq_out:
            lq = cv2.resize(rgb, (width // lq_scale, height // lq_scale), interpolation=cv2.INTER_CUBIC)
            write_image(os.path.join(lq_out, name), lq, order='RGB')
        if lmdb:
            encoded.append((encode_image(rgb, '.' + image_format, f'line {i + 1}', order='RGB'), text))
    if out:
        with open(labels or os.path.join(out, 'labels.tsv'), 'w', encoding='utf-8') as f:
            f.writelines(label_lines)
    if lmdb:
        write_fudanvi_lmdb(lmdb, encoded)
    say(f'rendered {num} lines' + (f' -> {out}' if out else '') + (f' -> {lmdb}' if lmdb else ''), sys.stdout)
    return 0


def write_rendered_pairs(folder: str, num: int, seed: int, scale: int = 4) -> str:
    """``num`` rendered lines as a paired set: ``folder``/hr/000001.png..., ``folder``/lr_x<scale>/ (the same names
    downsampled bicubic) and ``folder``/labels.tsv (the tests' ``rendered_sets`` fixture). -> ``folder``."""
    os.makedirs(folder, exist_ok=True)
    write_rendered_lines(num, seed=seed, out=os.path.join(folder, 'hr'), labels=os.path.join(folder, 'labels.tsv'),
                         lq_out=os.path.join(folder, f'lr_x{scale}'), lq_scale=scale)
    return folder
