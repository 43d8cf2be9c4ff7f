"""Text, JSON and CSV files written atomically (``checkpoint_io.atomic_write``: a temporary file in the same folder,
fsynced, then renamed), so a crash or a full disk never leaves a half-written file under its final name. Each writer
makes the file's folder when it is missing. And the reader of the JSON files the package keeps for itself (caches,
manifests), which takes a missing or broken file as no file."""
import csv
import json
import os
from typing import Dict, Iterable, Mapping, Optional, Sequence

from tola_plugin.utils.checkpoint_io import atomic_write


def _atomic(path: str, fill) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, fill)


def write_text(path: str, text: str) -> None:
    """A UTF-8 text file."""

    def fill(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            f.write(text)

    _atomic(path, fill)


def write_json(path: str, obj) -> None:
    """JSON (UTF-8, indented, non-ASCII kept)."""
    write_text(path, json.dumps(obj, ensure_ascii=False, indent=2) + '\n')


def read_json_dict(path: str) -> Optional[Dict]:
    """The JSON object in ``path``; None when the file is missing, unreadable, not JSON or not an object (a cache
    or manifest that is then made again)."""
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_csv(path: str, fields: Sequence[str], rows: Iterable[Mapping[str, object]]) -> None:
    """A UTF-8 CSV with a header row of ``fields``; each row a mapping from field to value."""

    def fill(tmp):
        with open(tmp, 'w', encoding='utf-8', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=list(fields))
            writer.writeheader()
            for row in rows:
                writer.writerow(row)

    _atomic(path, fill)
