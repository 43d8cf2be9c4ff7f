"""The prior CSV of ``tola-infer`` (line mode): what TransOCR read in each restored line, one row per image.

Format: UTF-8 CSV with a header (cells a spreadsheet would run as formulas start with ``'``:
``utils/atomic_files.py``); required columns ``filename``, ``prior_text``, ``prior_confidence`` (the mean of
the per-character confidences, in [0, 1]); optional ``prior_token_confidences`` (space-separated floats). The folder
run writes it atomically after every batch (``folder_run.PriorFile``); tools/evaluate.py and tools/diagnose.py read it
back (``read_prior_csv``). docs/evaluation.md, "Files".
"""
from typing import Dict, Iterable, List, Mapping

from tola_plugin.utils.atomic_files import read_csv, write_csv

PRIOR_COLUMNS = ('filename', 'prior_text', 'prior_confidence')


def read_prior_rows(path: str) -> List[Dict[str, object]]:
    """Prior CSV -> its rows in file order: {'filename', 'prior_text', 'prior_confidence' (float in [0, 1]) and,
    when the file has the column, 'prior_token_confidences' (list of floats)}. Errors name the file."""
    fields, table = read_csv(path)
    missing = [c for c in PRIOR_COLUMNS if c not in fields]
    if missing:
        raise ValueError(f'prior CSV {path!r} lacks column(s) {missing}; required: {list(PRIOR_COLUMNS)}')
    rows, seen = [], set()
    for row in table:
        name = row['filename']
        try:
            conf = float(row['prior_confidence'])
            tokens = [float(c) for c in (row.get('prior_token_confidences') or '').split()]
        except (TypeError, ValueError):
            raise ValueError(f'prior CSV {path!r}: a confidence of {name!r} is not a number') from None
        if not 0.0 <= conf <= 1.0:
            raise ValueError(f'prior CSV {path!r}: prior_confidence {conf} of {name!r} is outside [0,1]')
        if name in seen:
            raise ValueError(f'prior CSV {path!r}: duplicate filename {name!r}')
        seen.add(name)
        out = {'filename': name, 'prior_text': row['prior_text'], 'prior_confidence': conf}
        if 'prior_token_confidences' in fields:
            out['prior_token_confidences'] = tokens
        rows.append(out)
    return rows


def read_prior_csv(path: str) -> Dict[str, Dict[str, object]]:
    """Prior CSV -> {filename: {'prior_text': str, 'prior_confidence': float}} (confidence in [0,1])."""
    out = {
        r['filename']: {'prior_text': r['prior_text'], 'prior_confidence': r['prior_confidence']}
        for r in read_prior_rows(path)
    }
    if not out:
        raise ValueError(f'prior CSV {path!r} has no rows')
    return out


def write_prior_csv(path: str, rows: Iterable[Mapping[str, object]]) -> None:
    """Write a prior CSV atomically . rows: dicts with the PRIOR_COLUMNS keys
    (and optionally 'prior_token_confidences', a sequence of floats)."""
    rows = list(rows)
    extra = any('prior_token_confidences' in r for r in rows)
    fields = list(PRIOR_COLUMNS) + (['prior_token_confidences'] if extra else [])
    out = []
    for r in rows:
        row = {k: r[k] for k in PRIOR_COLUMNS}
        if extra:
            row['prior_token_confidences'] = ' '.join(f'{float(c):.6f}' for c in r.get('prior_token_confidences', ()))
        out.append(row)
    write_csv(path, fields, out)
