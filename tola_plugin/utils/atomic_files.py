"""Files written atomically (``atomic_write``: a temporary file in the same folder, fsynced, then renamed; images,
checkpoints, text, JSON and CSV all go through it), so a crash or a full disk never leaves a half-written file under
its final name. Each writer makes the file's folder when it is missing. And the bounded readers of the text files the
package parses (labels, CSV and JSON files: ``read_bytes``, ``read_text_file``, ``read_json``, ``read_csv``; a file over
``MAX_TEXT_BYTES`` is refused before it is read), with the reader of the JSON files the package keeps for itself
(caches, manifests), which takes a missing or broken file as no file.

CSV cells are written so that no terminal obeys them (control characters escaped, a backslash doubled:
``user_text.recorded``) and no spreadsheet runs them: a text cell starting with ``=``, ``+``, ``-``, ``@``, a tab
or a carriage return (a formula to Excel, LibreOffice and Google Sheets: an input file named ``=HYPERLINK(...).png``,
a recognised label ``-2+3``) gets a leading ``'``, as does one that already starts with ``'``; ``read_csv`` takes it
off again, so what is read back is what was written. Numbers are written as they are."""
import contextlib
import csv
import io
import json
import os
import re
import tempfile
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tola_plugin.utils.user_paths import TEMPORARY_SUFFIX, check_regular_file, temporary_name
from tola_plugin.utils.user_text import json_text, recorded, unrecorded


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str, write: Callable[[str], None]) -> str:
    """Write ``path`` atomically: ``write(tmp)`` fills a temporary file in the same folder, which is fsynced
    and renamed over ``path`` (then the folder is fsynced). On any failure the temporary file is removed and
    ``path`` is untouched. The file gets a new file's mode (0666 less the umask), whatever ``write`` did: mkstemp
    makes the temporary file private, and some writers (safetensors) replace it with a file of their own. The
    temporary name (``user_paths.temporary_name``) fits the file system whatever the final name's length. A write
    that fails for the file system (a full disk: ENOSPC) is one OSError naming ``path`` and the cause, whatever the
    writer raised (``write_failure``). Returns ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=temporary_name(path), suffix=TEMPORARY_SUFFIX, dir=folder)
    os.close(fd)
    try:
        write(tmp)
        # mkstemp makes the file private, and some writers replace it by a private one of their own (safetensors'
        # save_file): give it a normal file's mode, as the user's umask says
        os.chmod(tmp, 0o666 & ~_umask())
        with open(tmp, 'rb+') as f:
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        failure = write_failure(err)
        if failure is None:
            raise
        raise OSError(failure, os.strerror(failure), path) from err  # one line: the file and the cause
    with contextlib.suppress(OSError):  # not every file system lets a directory be opened for fsync
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def write_failure(err: BaseException) -> Optional[int]:
    """The errno of the file system's refusal behind ``err`` (ENOSPC, EDQUOT, EFBIG, EIO, ...), else None. Writers
    hide it: torch's zip writer raises ``unexpected pos 1061120 vs 1061008`` with the OSError of the Python file it
    wrote to as its context; safetensors' message ends in ``(os error 28)``."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno is not None:
            return err.errno
        found = re.search(r'\(os error (\d+)\)', str(err))
        if found:
            return int(found.group(1))
        err = err.__cause__ or err.__context__
    return None


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
    """JSON (UTF-8, indented, non-ASCII kept but control characters escaped: ``user_text.json_text``)."""
    write_text(path, json_text(json.dumps(obj, ensure_ascii=False, indent=2)) + '\n')


MAX_TEXT_BYTES = 256 << 20  # a labels file, a CSV or a JSON record: far above any real one (CTR-TSR's labels: 20 MB)


def read_bytes(path: str, what: str = 'file', limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of ``path``; a file over ``limit`` bytes is a ValueError naming it and ``what`` it is, before its
    content is read. A path that is not a regular file (a folder, a FIFO, a device) is an error naming what it is,
    before anything is opened: reading a FIFO would wait for a writer for ever, a device would never end."""
    check_regular_file(path, what)
    with open(path, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b''
    if size > limit or len(data) > limit:
        raise ValueError(f'{path}: {max(size, len(data)):,} bytes, more than a {what} may have '
                         f'({limit:,}); is it the right file?')
    return data


def read_text_file(path: str, what: str = 'file') -> str:
    """The UTF-8 text of ``path`` (``read_bytes``' bound; a byte-order mark is dropped); other bytes are a
    ValueError naming the file."""
    data = read_bytes(path, what)
    try:
        return data.decode('utf-8-sig')
    except UnicodeDecodeError as err:
        raise ValueError(f'{path}: not UTF-8 text ({err.reason} at byte {err.start}); a {what} is UTF-8') from None


def read_json(path: str, what: str = 'JSON file'):
    """The JSON value in ``path`` (``read_text_file``' bound); not JSON is a ValueError naming the file."""
    try:
        return json.loads(read_text_file(path, what))
    except json.JSONDecodeError as err:
        raise ValueError(f'{path}: not a {what} (JSON: {err})') from None


def read_json_dict(path: str, limit: int = MAX_TEXT_BYTES) -> Optional[Dict]:
    """The JSON object in ``path``; None when the file is missing, unreadable, over ``limit`` bytes (refused from its
    size, unread), not JSON or not an object (a cache or manifest that is then made again)."""
    try:
        data = json.loads(read_bytes(path, 'JSON file', limit).decode('utf-8-sig'))
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return data if isinstance(data, dict) else None


FORMULA_STARTS = ('=', '+', '-', '@', '\t', '\r')
ESCAPE = "'"


def csv_cell(value):
    """``value`` as a CSV cell that neither a spreadsheet evaluates nor a terminal obeys: text gets its control
    characters escaped (``user_text.recorded``), then a leading ``'`` when it starts with FORMULA_STARTS (or the
    escape itself); anything else is returned as it is."""
    if not isinstance(value, str):
        return value
    value = recorded(value)
    return ESCAPE + value if value.startswith(FORMULA_STARTS + (ESCAPE, )) else value


def write_csv(path: str, fields: Sequence[str], rows: Iterable[Mapping[str, object]]) -> None:
    """A UTF-8 CSV with a header row of ``fields``; each row a mapping from field to value (cells: ``csv_cell``)."""

    def fill(tmp):
        with open(tmp, 'w', encoding='utf-8', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=list(fields))
            writer.writerow({k: csv_cell(k) for k in fields})
            for row in rows:
                writer.writerow({k: csv_cell(v) for k, v in row.items()})

    _atomic(path, fill)


def read_csv(path: str) -> Tuple[List[str], List[Dict[str, str]]]:
    """(header, rows) of a CSV that ``write_csv`` wrote: each row a mapping from field to text, the ``'`` that
    ``csv_cell`` added taken off."""
    reader = csv.DictReader(io.StringIO(read_text_file(path, 'CSV file'), newline=''))
    rows = [{k: _uncell(v) for k, v in row.items()} for row in reader]
    return [_uncell(name) for name in reader.fieldnames or []], rows


def _uncell(value):
    if not isinstance(value, str):
        return value
    return unrecorded(value[1:] if value.startswith(ESCAPE) else value)
