"""Files of the evaluation: labels manifests, exact filename matching, per-image CSVs, summaries.

Formats (docs/evaluation.md has the full description):
- labels manifest: UTF-8 TSV, one ``filename<TAB>transcription`` per line, no header (the dataset tools'
  format, read by ``tola_plugin.data.text_labels.read_labels_tsv``).
- prior CSV: written by the TOLA inference tool, read here through ``tola_plugin.inference.prior_csv``.
- per-image CSV (written by tools/evaluate.py): one row per image, columns in ``PER_IMAGE_COLUMNS`` order
  (those the run computed).

Every file is written atomically (``tola_plugin.utils.atomic_files``), so a crash or a full disk never leaves a
half-written CSV or JSON under its final name.
"""
import math
import os
from collections import Counter
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tola_plugin.data.image_io import IMAGE_EXTENSIONS, list_image_files
from tola_plugin.data.text_labels import read_labels_tsv
from tola_plugin.utils.atomic_files import read_csv, write_csv

MAX_LISTED = 20  # names listed in a mismatch error

# Column prefixes of the recognizers (tola_plugin.ocr.recognizers): T-ACC/T-NED, P-ACC/P-NED as in the paper's tables.
PREFIX = {'transocr': 't_', 'ppocrv4': 'p_'}

# Per-image columns. Recognizer columns are prefixed 't_' (TransOCR) and 'p_' (PP-OCRv4 / PaddleOCR):
# <prefix>pred (raw recognizer output), <prefix>conf (recognizer confidence), <prefix>acc (0/1), <prefix>ned.
PER_IMAGE_COLUMNS = ('filename', 'gt', 'psnr', 'ssim', 'lpips', 'dists', 't_pred', 't_conf', 't_acc', 't_ned', 'p_pred',
                     'p_conf', 'p_acc', 'p_ned')
TEXT_COLUMNS = ('filename', 'gt', 't_pred', 'p_pred')

# Display names and directions of the set-level metrics (Table 1 of the paper), in table order.
SUMMARY_METRICS = (('psnr', 'PSNR', True), ('ssim', 'SSIM', True), ('lpips', 'LPIPS', False), ('dists', 'DISTS', False),
                   ('fid', 'FID', False), ('t_acc', 'T-ACC', True), ('t_ned', 'T-NED', True), ('p_acc', 'P-ACC', True),
                   ('p_ned', 'P-NED', True))


def list_images(folder: str) -> List[str]:
    """Sorted image file names directly inside ``folder``; an image in a subfolder is an error (FID reads
    folders recursively, so nested images would silently enter it)."""
    names = list_image_files(folder, recursive=True)
    nested = [n for n in names if os.sep in n]
    if nested:
        raise ValueError(f'{folder!r} contains an image in a subfolder ({os.path.join(folder, nested[0])!r}); '
                         f'evaluation folders must be flat')
    if not names:
        raise ValueError(f'image folder {folder!r} contains no images ({", ".join(IMAGE_EXTENSIONS)})')
    return names


def _listing(names: Iterable[str]) -> str:
    names = sorted(names)
    shown = ', '.join(names[:MAX_LISTED])
    return f'{shown}, ... ({len(names)} in total)' if len(names) > MAX_LISTED else shown


def match_filenames(sets: Mapping[str, Sequence[str]]) -> List[str]:
    """Exact filename matching across named sets (folders, manifests); returns the common sorted names.

    Any name missing from any set is a ValueError listing, per set, the names it lacks and has extra.
    """
    if not sets:
        raise ValueError('nothing to match')
    union = set().union(*[set(v) for v in sets.values()])
    problems = []
    for label, names in sets.items():
        missing = union - set(names)
        if missing:
            problems.append(f'{label} lacks {len(missing)} name(s): {_listing(missing)}')
    if problems:
        raise ValueError('filenames do not match exactly:\n  ' + '\n  '.join(problems))
    return sorted(union)


def basicsr_output_names(names: Sequence[str], expected: Sequence[str]) -> Tuple[Dict[str, str], Optional[str]]:
    """Match a folder written by BasicSR's test launcher to the expected (reference or labels) names.

    BasicSR saves the restoration of ``<stem>.<ext>`` as ``<stem>_<suffix>.png`` (``suffix``: the option file's
    ``val.suffix``, else its ``name``). When every image of the folder is named so, for one suffix and an expected
    stem, returns ``({expected name: file name}, suffix)``; otherwise ``({name: name}, None)`` (exact names).
    """
    exact = {n: n for n in names}
    stems = {os.path.splitext(n)[0]: n for n in expected}
    if not stems or set(expected) <= set(names):
        return exact, None
    candidates = Counter()
    for name in names:
        base, ext = os.path.splitext(name)
        if ext != '.png':
            return exact, None
        candidates.update({base[i + 1:] for i, c in enumerate(base) if c == '_' and base[:i] in stems})
    if not candidates:
        return exact, None
    suffix = candidates.most_common(1)[0][0]
    tail, files = f'_{suffix}.png', {}
    for name in names:
        stem = name[:-len(tail)] if name.endswith(tail) else None
        if stem not in stems:
            return exact, None
        files[stems[stem]] = name
    return files, suffix


def read_labels(path: str) -> Dict[str, str]:
    """Labels manifest -> {filename: transcription}; the project's one format and reader
    (``tola_plugin.data.text_labels.read_labels_tsv``: TSV filename<TAB>transcription, no header)."""
    return dict(read_labels_tsv(path))


def write_per_image_csv(path: str, rows: Sequence[Mapping[str, object]]) -> None:
    """Per-image results in PER_IMAGE_COLUMNS order (only the columns present in the rows)."""
    present = [c for c in PER_IMAGE_COLUMNS if any(c in r for r in rows)]
    write_csv(path, present, [{c: r.get(c, '') for c in present} for r in rows])


def read_per_image_csv(path: str) -> Dict[str, Dict[str, object]]:
    """Per-image CSV -> {filename: row}; numeric columns become floats."""
    rows = {}
    for row in read_csv(path)[1]:
        rows[row['filename']] = {
            k: (v if k in TEXT_COLUMNS else float(v))
            for k, v in row.items() if v != '' or k in TEXT_COLUMNS
        }
    if not rows:
        raise ValueError(f'per-image CSV {path!r} has no rows')
    return rows


def _fmt(value: Optional[float], key: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '-'
    return f'{value:.4f}'


def summary_markdown(summary: Mapping[str, Mapping[str, float]], title: str = '', transocr: str = '') -> str:
    """Methods x metrics table (paper order, 4 decimals, arrows for direction); absent metrics omitted. ``transocr``:
    which TransOCR read the T- columns when not the official one ('demo': T-ACC (demo TransOCR), ...)."""
    keys = [(k, f'{name} ({transocr} TransOCR)' if transocr and k.startswith('t_') else name, up)
            for k, name, up in SUMMARY_METRICS if any(k in m for m in summary.values())]
    head = '| Method | ' + ' | '.join(f'{name}{"↑" if up else "↓"}' for _, name, up in keys) + ' |'
    sep = '| --- | ' + ' | '.join('---:' for _ in keys) + ' |'
    lines = ([f'## {title}', ''] if title else []) + [head, sep]
    for method, metrics in summary.items():
        lines.append(f'| {method} | ' + ' | '.join(_fmt(metrics.get(k), k) for k, _, _ in keys) + ' |')
    return '\n'.join(lines) + '\n'
