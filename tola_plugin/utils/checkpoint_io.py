"""Safe checkpoint reading and atomic checkpoint writing, shared by every loader and saver of the package
(the strict key-by-key check of a state dict is ``tola_plugin.checkpoints.strict``).

Reading never runs pickled code: our own loaders call ``safe_torch_load`` (``weights_only=True``), and code of
other libraries (pyiqa, lpips, torchvision, BasicSR) that loads weights runs inside ``weights_only_loads()``,
which makes *their* ``torch.load`` calls weights-only too (pyiqa and torchvision pass ``weights_only=False``).
A file that needs pickled code is refused with its path (``UnsafeCheckpointError``), before anything in it runs.

Writing is atomic (``atomic_torch_save``, through ``atomic_files.atomic_write``): a temporary file in the same
folder, fsync, rename. A run killed while saving leaves the previous file (or none), never a truncated one under the
final name.

Nothing here downloads: a missing file is an error naming the file and where to get it.
"""
import contextlib
import os
import threading
from typing import Iterator, Mapping, Tuple

import torch

from tola_plugin.utils.atomic_files import atomic_write
from tola_plugin.utils.user_paths import MISSING, NOTHING_THERE, NotARegularFile, check_regular_file, path_kind

_TORCH_LOAD = torch.load  # the real loader, captured before any guard replaces the module attribute
_GUARD_LOCK = threading.Lock()
_GUARD_DEPTH = 0


class UnsafeCheckpointError(ValueError):
    """A weights file that cannot be read without running pickled code, or that is not a torch file at all."""


def require_file(path: str, what: str, where: str) -> str:
    """Return ``path`` if it is a regular file; else FileNotFoundError when there is nothing there, NotARegularFile
    (a ValueError) naming what is there (a folder, a FIFO, a device, a symlink loop), each saying where to get the
    file. Nothing is opened."""
    kind = path_kind(path) if path else MISSING
    if kind == 'a file':
        return path
    if kind in NOTHING_THERE:
        raise FileNotFoundError(f'{what} not found at {path!r}' + ('' if kind == MISSING else f' ({kind})') +
                                f'. {where}')
    raise NotARegularFile(f'{what} at {path!r} is {kind}, not a regular file. {where}')


def _unreadable(what: str, path, err: Exception) -> UnsafeCheckpointError:
    return UnsafeCheckpointError(f'{what} at {path!r} could not be read as a pickle-free torch checkpoint '
                                 f'(truncated, corrupt, or carrying code; nothing in it was run): '
                                 f'{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ""}')


def safe_torch_load(path: str, what: str, mmap: bool = False) -> Mapping:
    """``torch.load`` with ``weights_only=True`` (never runs pickled code); any failure but a missing file is an
    ``UnsafeCheckpointError`` (a ValueError) naming ``what`` and ``path``. ``mmap``: map the tensors instead of
    reading them (fast validation of a large file; zip-format files only). A path that is not a regular file (a
    folder, a FIFO, a device) is an error naming what it is, before torch opens it (a FIFO would wait for ever)."""
    if isinstance(path, (str, os.PathLike)):
        check_regular_file(path, what)
    try:
        return _TORCH_LOAD(path, map_location='cpu', weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        raise _unreadable(what, path, err) from err


def check_weights_file(path: str, what: str) -> str:
    """Refuse ``path`` unless it reads as weights only (memory-mapped: the pickle is checked, the tensors are not
    read, so a 500 MB file takes milliseconds). Returns ``path``. Call it before handing a file to a library."""
    try:
        safe_torch_load(path, what, mmap=True)
    except UnsafeCheckpointError as err:
        if 'mmap' not in str(err):
            raise
        safe_torch_load(path, what)  # the legacy (pre-zip) format cannot be mapped: read it whole
    return path


def safetensors_metadata(path: str, what: str) -> dict:
    """The metadata of a safetensors file; a truncated or foreign file is an ``UnsafeCheckpointError`` naming
    ``what`` and ``path`` (safetensors checks the header against the file size when opening)."""
    from safetensors import safe_open
    check_regular_file(path, what)
    try:
        with safe_open(path, framework='pt') as f:
            return dict(f.metadata() or {})
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001  safetensors raises SafetensorError, OSError, ...
        raise UnsafeCheckpointError(f'{what} at {path!r} is not a complete safetensors file (truncated or not '
                                    f'safetensors): {type(err).__name__}: {err}') from err


@contextlib.contextmanager
def open_safetensors(path: str, what: str, fmt: str, writer: str) -> Iterator[Tuple[object, dict]]:
    """Open a safetensors file that one of our writers made: yields (safetensors handle, metadata). A file that is
    not safetensors is a ValueError naming ``what`` and ``path``; metadata ``format`` other than ``fmt`` is a
    ValueError naming the ``writer`` that makes such files."""
    from safetensors import safe_open
    try:
        handle = safe_open(path, framework='pt', device='cpu')
    except Exception as err:  # noqa: BLE001  safetensors raises SafetensorError / OSError
        raise ValueError(f'{what} at {path!r} is not a valid safetensors file: {err}') from err
    with handle as f:
        meta = f.metadata() or {}
        if meta.get('format') != fmt:
            raise ValueError(f'{path!r} is not a {what} written by {writer} (metadata format '
                             f'{meta.get("format")!r}, expected {fmt!r})')
        yield f, meta


def _guarded_load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args):
    """``torch.load`` as the guard installs it: always ``weights_only=True``, failures name the file."""
    name = f if isinstance(f, (str, os.PathLike)) else getattr(f, 'name', repr(f))
    if pickle_module is not None:
        raise UnsafeCheckpointError(f'refusing to load {name!r} with a custom pickle module (weights-only '
                                    f'loading is enforced here)')
    try:
        return _TORCH_LOAD(f, map_location=map_location, weights_only=True, mmap=mmap, **pickle_load_args)
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001  torch raises many types for unsafe or broken files
        raise _unreadable('weights file', str(name), err) from err


@contextlib.contextmanager
def weights_only_loads() -> Iterator[None]:
    """Inside this block every ``torch.load`` of the process (ours and other libraries') is weights-only.

    pyiqa (``load_pretrained_network``) and torchvision (``load_state_dict_from_url``) pass
    ``weights_only=False``; this replaces ``torch.load`` for the duration, so that their files are read
    without running code and a file that needs code is refused with its path. Nesting is allowed.
    """
    global _GUARD_DEPTH
    with _GUARD_LOCK:
        _GUARD_DEPTH += 1
        torch.load = _guarded_load
    try:
        yield
    finally:
        with _GUARD_LOCK:
            _GUARD_DEPTH -= 1
            if _GUARD_DEPTH == 0:
                torch.load = _TORCH_LOAD


def atomic_torch_save(obj, path: str) -> str:
    """``torch.save(obj, path)`` through ``atomic_write``, into a Python file: torch's own file writer drops the
    errno of a failed write (a full disk is ``unexpected pos ...``), a Python file's OSError keeps it."""

    def write(tmp):
        with open(tmp, 'wb') as f:
            torch.save(obj, f)

    return atomic_write(path, write)
