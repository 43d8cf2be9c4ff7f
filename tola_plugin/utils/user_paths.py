"""Paths built from user text, and paths a user gives: one place that keeps them where they belong.

- ``check_name``: a name that becomes one path component (an experiment's ``name``, a ``--suffix`` appended to a
  file name): text, no ``/`` or NUL, not ``.`` or ``..``, and short enough that what is appended to it later (by
  BasicSR, by the lock and log files, by a temporary name) still fits ``NAME_MAX`` bytes.
- ``path_inside``: ``folder`` joined with a relative path built from user text: the result stays inside ``folder``
  (no absolute path, no ``..`` that climbs out: compared after normalising, not as strings) and fits the file
  system (every component ``NAME_MAX`` bytes, the whole ``PATH_MAX``).
- ``temporary_name``: the name of a temporary file beside ``path`` (atomic writes), cut so that it fits
  ``NAME_MAX`` whatever ``path``'s name; ``temporary_stem`` tells which final name a temporary name belongs to.
- ``check_regular_file`` / ``check_folder_target``: what a given path is (a folder, a FIFO, a device, a socket, a
  symlink loop, missing), checked without opening it (opening a FIFO waits for a writer for ever), and an error
  naming the path, what it is and what was expected.

Lengths are in bytes of the file system's encoding (``os.fsencode``): a name of 100 Chinese characters is 300 bytes.
"""
import errno
import os
import stat
from typing import Optional

from tola_plugin.utils.user_text import UNSAFE, shown

NAME_MAX = 255  # bytes of one path component on Linux's file systems (ext4, xfs, btrfs, tmpfs)
PATH_MAX = 4096  # bytes of a whole path on Linux
TEMPORARY_SUFFIX = '.tmp'
RANDOM_CHARS = 8  # tempfile.mkstemp's random part


def name_bytes(name: str) -> int:
    """Bytes of ``name`` in the file system's encoding."""
    return len(os.fsencode(name))


def check_name(name, what: str, reserve: int = 0) -> str:
    """``name`` as one path component, else a ValueError naming ``what`` and the rule: text, not empty, no '/' or
    NUL, not '.' or '..', no control character (``user_text.UNSAFE``), at most NAME_MAX - ``reserve`` bytes
    (``reserve``: what is appended to it later)."""
    if not isinstance(name, str):
        raise ValueError(f'{what}: expected text, got {name!r}')
    _refuse_separators(name, what, 'it names one file or folder')
    if name in ('.', '..', ''):
        raise ValueError(f'{what} {name!r}: names no file or folder (empty, or the folder itself or its parent)')
    if UNSAFE.search(name):
        raise ValueError(f'{what} {shown(name)!r}: holds control characters; a name is typed and printed, so it may '
                         'not')
    limit = NAME_MAX - reserve
    if name_bytes(name) > limit:
        raise ValueError(f'{what}: {name_bytes(name)} bytes ({shorten(name)}), more than the {limit} a name may have '
                         f'here (a file name has at most {NAME_MAX} bytes' +
                         (f', and {reserve} are added to this one)' if reserve else ')'))
    return name


def check_affix(text, what: str, why: str) -> str:
    """``text`` (a ``--suffix``: added to a file name, may be empty) when it holds no path separator or NUL; else a
    ValueError naming ``what`` and ``why`` it may not (``--suffix '/../../x'`` would write outside the output
    folder)."""
    if not isinstance(text, str):
        raise ValueError(f'{what}: expected text, got {text!r}')
    _refuse_separators(text, what, why)
    return text


def _refuse_separators(text: str, what: str, why: str) -> None:
    bad = [c for c in ('/', os.altsep, '\0') if c and c in text]
    if bad:
        raise ValueError(f'{what} {text!r}: holds {bad[0]!r}; {why}, so it may not hold a path separator (it would '
                         'write outside its folder) or a NUL byte')


def shorten(text: str, keep: int = 40) -> str:
    """``text`` cut to its first ``keep`` characters for a message."""
    return repr(text if len(text) <= keep else text[:keep] + '...')


def path_inside(folder: str, relative: str, what: str) -> str:
    """``folder`` / ``relative`` (a path built from user text), normalised; a ValueError naming ``what`` when it would
    leave ``folder`` (absolute, or a '..' that climbs out), holds NUL, or does not fit the file system (a component
    over NAME_MAX bytes, the whole over PATH_MAX)."""
    if '\0' in relative:
        raise ValueError(f'{what} {relative!r}: holds a NUL byte')
    if os.path.isabs(relative):
        raise ValueError(f'{what} {relative!r}: an absolute path; it must stay inside {folder}')
    joined = os.path.normpath(os.path.join(folder, relative))
    base = os.path.normpath(folder)
    if os.path.relpath(joined, base).split(os.sep)[0] == os.pardir or joined == base:
        raise ValueError(f'{what} {relative!r}: leads to {joined}, outside {folder}')
    for part in os.path.relpath(joined, base).split(os.sep):
        if name_bytes(part) > NAME_MAX:
            raise ValueError(f'{what}: the name {shorten(part)} has {name_bytes(part)} bytes; a file name has at most '
                             f'{NAME_MAX} (choose a shorter --suffix, or rename the input)')
    size = name_bytes(os.path.abspath(joined))
    if size > PATH_MAX:
        raise ValueError(f'{what}: the path {shorten(joined)} has {size} bytes; a path has at most {PATH_MAX}')
    return joined


def temporary_name(path: str) -> str:
    """The prefix of a temporary file beside ``path`` (``.<name>.``, the name cut to fit): mkstemp adds
    RANDOM_CHARS and TEMPORARY_SUFFIX, and the whole stays within NAME_MAX bytes."""
    return f'.{_cut(os.path.basename(path), NAME_MAX - 2 - RANDOM_CHARS - len(TEMPORARY_SUFFIX))}.'


def temporary_stem(name: str) -> Optional[str]:
    """The (cut) final name a temporary file name ``name`` belongs to (``.<stem>.<random>.tmp``, the random part
    letters, digits and '_' as mkstemp makes them); None when ``name`` is not one."""
    if not (name.startswith('.') and name.endswith(TEMPORARY_SUFFIX)):
        return None
    stem, dot, random = name[1:-len(TEMPORARY_SUFFIX)].rpartition('.')
    if not (dot and stem and random) or not all(c.isalnum() or c == '_' for c in random):
        return None
    return stem


def temporary_stem_of(path: str) -> str:
    """``temporary_stem`` of the temporary files of ``path``: its name as ``temporary_name`` cuts it."""
    return temporary_name(path)[1:-1]


def _cut(name: str, limit: int) -> str:
    raw = os.fsencode(name)
    return name if len(raw) <= limit else os.fsdecode(raw[:limit])


# ------------------------------------------------------------------------------------------- what a path is
MISSING, BROKEN_LINK, UNDER_A_FILE = 'missing', 'a broken symlink', 'under a file (a part of its path is not a folder)'
NOTHING_THERE = (MISSING, BROKEN_LINK, UNDER_A_FILE)  # the kinds of a path that names no file
KINDS = ((stat.S_ISREG, 'a file'), (stat.S_ISDIR, 'a folder'), (stat.S_ISFIFO, 'a FIFO (named pipe)'),
         (stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device'), (stat.S_ISSOCK, 'a socket'))


def path_kind(path: str) -> str:
    """What ``path`` is, in words: 'a file', 'a folder', 'a FIFO (named pipe)', 'a character device', 'a block
    device', 'a socket', 'a symlink loop', or one of NOTHING_THERE, or 'unreadable (<reason>)'."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return BROKEN_LINK if os.path.islink(path) else MISSING
    except OSError as err:
        if err.errno == errno.ELOOP:
            return 'a symlink loop'
        if err.errno == errno.ENOTDIR:
            return UNDER_A_FILE
        return f'unreadable ({err.strerror})'
    for test, words in KINDS:
        if test(mode):
            return words
    return 'not a file'


class NotARegularFile(ValueError):
    """A path that exists but is not a regular file (a folder, FIFO, device, socket, symlink loop)."""


def check_regular_file(path: str, what: str, expected: str = '') -> str:
    """``path`` when it is a regular file (after symlinks); FileNotFoundError when missing, NotARegularFile (a
    ValueError) naming what it is and ``expected`` otherwise. Nothing is opened: a FIFO or a device is refused before
    any read could wait on it."""
    kind = path_kind(os.fspath(path))
    if kind == 'a file':
        return path
    if kind in NOTHING_THERE:
        raise FileNotFoundError(f'{what} not found: {path}' + ('' if kind == MISSING else f' ({kind})'))
    raise NotARegularFile(f'{what} {path} is {kind}, not a regular file' +
                          (f'; expected {expected}' if expected else ''))


def check_folder_target(path: str, what: str) -> str:
    """``path`` as a folder to write into: a folder, or missing where its first existing ancestor is a folder (it
    can be made); else a ValueError naming what is in the way (``-o`` naming a file, or a file among its parents)."""
    kind = path_kind(path)
    if kind == 'a folder':
        return path
    if os.path.lexists(path):
        raise ValueError(f'{what} {path} is {kind}; expected a folder (it is made when missing)')
    ancestor = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(ancestor) and ancestor != os.path.dirname(ancestor):
        ancestor = os.path.dirname(ancestor)
    ancestor_kind = path_kind(ancestor)
    if ancestor_kind != 'a folder':
        raise ValueError(f'{what} {path}: cannot be made, {ancestor} is {ancestor_kind}, not a folder')
    return path
