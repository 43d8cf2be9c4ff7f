"""One run per folder: a lock file holding the owner's PID (experiments, results, tola-infer output folders).

``experiments/<name>.lock`` (``results/<name>.lock`` for the test launcher) is created atomically
(``O_CREAT | O_EXCL``) before the folder is touched and removed when the process exits. A second run on the
same folder is refused with the owner's PID and command. A lock whose process is gone (killed with
SIGKILL, machine restarted) is stale: it is replaced, with a warning. It lives next to the folder rather than
inside it because BasicSR renames an existing folder to ``*_archived_*`` when a fresh run starts; callers whose
folder is never renamed (tola-infer) may keep it inside (``lock_file``).
"""
import atexit
import json
import os
import socket
import sys
import time
from typing import Callable, Optional

from tola_plugin.utils import procfs


class ExperimentInUseError(OSError):
    """The experiment folder is locked by a live process."""


_HELD = []  # lock files this process owns


def _start_time(pid: int) -> Optional[str]:
    """Start time of ``pid`` in clock ticks since boot (Linux ``/proc``), to tell a live owner from a new
    process that reuses its PID; None where ``/proc`` is not available."""
    fields = procfs.stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _alive(owner: dict) -> bool:
    """Whether the process recorded in a lock still runs (on this host)."""
    pid = owner.get('pid')
    if not isinstance(pid, int) or pid <= 0 or not procfs.pid_alive(pid):
        return False
    recorded, now = owner.get('start_time'), _start_time(pid)
    return recorded is None or now is None or recorded == now


def lock_path(folder: str) -> str:
    return os.path.normpath(folder) + '.lock'


def acquire(folder: str, warn: Callable[[str], None], lock_file: Optional[str] = None,
            advice: str = 'Wait for it to finish, or change "name" in the option file.') -> str:
    """Lock ``folder`` for this process (released at exit); returns the lock file's path (``lock_file``, default
    ``lock_path(folder)``).

    Raises ExperimentInUseError naming the owner when a live process holds the lock (or when the lock was
    written on another host, whose processes cannot be checked from here); ``advice`` ends its message.
    """
    path = lock_file or lock_path(folder)
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    me = {
        'pid': os.getpid(), 'host': socket.gethostname(), 'start_time': _start_time(os.getpid()),
        'command': ' '.join(sys.argv)
    }
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _read(path, retries=10)  # None: unreadable after 0.5 s (a starter killed mid-write)
            if owner == {}:  # released in the meantime
                continue
            if owner is not None and owner.get('pid') == me['pid'] and owner.get('host') == me['host']:
                return path  # this process already holds it (a second pipeline run in the same process)
            if owner is not None and owner.get('host') != me['host']:
                raise ExperimentInUseError(
                    f'{folder} is locked by PID {owner.get("pid")} on host {owner.get("host")!r} ({path}); this '
                    f'host cannot check that process. Delete {path} if that run is over.') from None
            if owner is not None and _alive(owner):
                raise ExperimentInUseError(
                    f'{folder} is in use by another run: PID {owner["pid"]} ({owner.get("command", "?")}), lock '
                    f'file {path}. {advice}') from None
            warn(f'removing the stale lock {path} of PID {owner.get("pid") if owner else "?"} '
                 f'(that process is gone)')
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            json.dump(me, f)
        if not _HELD:
            atexit.register(release_all)
        _HELD.append(path)
        return path
    raise ExperimentInUseError(f'could not take the lock {path} (other runs keep starting on {folder})')


def _read(path: str, retries: int = 0) -> Optional[dict]:
    """The lock's content; {} when the file is gone; None when it stays unreadable (empty or garbled)."""
    for attempt in range(retries + 1):
        try:
            with open(path, encoding='utf-8') as f:
                return json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):  # being written by its owner right now, or garbled
            if attempt < retries:
                time.sleep(0.05)
    return None


def release(path: str) -> None:
    """Remove the lock if this process still owns it."""
    owner = _read(path)
    if owner and owner.get('pid') == os.getpid():
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
    if path in _HELD:
        _HELD.remove(path)


def release_all() -> None:
    """Release every lock this process holds (at exit, and when a launcher's pipeline returns)."""
    for path in list(_HELD):
        release(path)
