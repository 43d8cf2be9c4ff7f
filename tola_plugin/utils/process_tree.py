"""A command run to its end or killed whole: the command and every process it started, also those that left its
process group (torchrun starts its workers in sessions of their own), so no worker is left holding a GPU's memory
after a timeout; the killed tree is waited for a bounded time (a process that escaped it, or one stuck in the driver,
cannot hang the caller). Linux (/proc, read by ``procfs``); standard library only."""
import os
import signal
import subprocess
import time
from typing import Dict, List, Optional, Sequence, Tuple

from tola_plugin.utils import procfs

# Seconds to wait, after the kill, for the command to end and its pipes to close: past them a process that left the
# tree still holding a pipe, or one stuck in the driver (uninterruptible: SIGKILL waits for it), is not waited for.
CLOSE_WAIT_S = 5.0


class TreeTimeout(subprocess.TimeoutExpired):
    """The command ran past its timeout: it and its descendants were killed (``killed``: their PIDs). ``unfinished``:
    '' when the command ended and its pipes closed after the kill, else what was not waited for (``output`` and
    ``stderr`` are then what was read until then)."""

    def __init__(self, cmd, timeout, output, stderr, killed: List[int], unfinished: str = ''):
        super().__init__(cmd, timeout, output, stderr)
        self.killed = killed
        self.unfinished = unfinished

    def __str__(self):
        return super().__str__() + (f'; {self.unfinished}' if self.unfinished else '')


def children_of() -> Dict[int, List[int]]:
    """{parent PID: [child PIDs]} of every process /proc lists now."""
    tree: Dict[int, List[int]] = {}
    for pid in procfs.pids():
        fields = procfs.stat_fields(pid)
        if fields is not None:  # None: ended while we read
            tree.setdefault(int(fields[1]), []).append(pid)
    return tree


def descendants(pid: int) -> List[int]:
    """Every process below ``pid`` now (children first), then those left in the session ``pid`` leads whose parent
    ended (orphans, adopted by init: no longer below it)."""
    tree, found, todo = children_of(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    for other in procfs.pids():
        fields = procfs.stat_fields(other)
        if other != pid and other not in found and fields is not None and fields[3] == str(pid):
            found.append(other)
    return found


def kill_tree(pid: int, grace: float = 5.0) -> List[int]:
    """SIGTERM to ``pid`` and its descendants, SIGKILL to whatever is left after ``grace`` seconds. -> the PIDs."""
    pids = [pid] + descendants(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 0)
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
    return pids


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, killed and not yet reaped, does not)."""
    fields = procfs.stat_fields(pid)
    return fields is not None and fields[0] != 'Z'


def _text(data) -> Optional[str]:
    """What ``communicate`` read before its timeout (bytes even in text mode) as text."""
    return data.decode('utf-8', 'replace') if isinstance(data, bytes) else data


def finish_killed(proc: subprocess.Popen, wait: Optional[float] = None) -> Tuple[Optional[str], Optional[str], str]:
    """After ``kill_tree``: (stdout, stderr, unfinished) of ``proc``, waiting at most ``wait`` seconds (default
    ``CLOSE_WAIT_S``) for it to end and its pipes to close; ``unfinished`` says what was not waited for ('' when
    nothing was)."""
    wait = CLOSE_WAIT_S if wait is None else wait
    try:
        out, err = proc.communicate(timeout=wait)
        return out, err, ''
    except subprocess.TimeoutExpired as expired:
        out, err = _text(expired.output), _text(expired.stderr)
    for pipe in (proc.stdout, proc.stderr):  # our ends, not read again (whoever holds the other end may live on)
        if pipe is not None:
            pipe.close()
    if proc.poll() is None:
        return out, err, (f'process {proc.pid} had not ended {wait:g} s after SIGKILL (stuck in the kernel or the '
                          'GPU driver?): not waited for')
    return out, err, (f'its output stayed open {wait:g} s after the kill (held by a process that left the tree, '
                      'in a session of its own?): not waited for; the output is what was read until then')


def run_tree(args: Sequence[str], timeout: float, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
             stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    """``subprocess.run(args, text=True)`` that on timeout kills the command's whole tree (``kill_tree``) and raises
    TreeTimeout with what it printed so far; it waits for the killed tree at most ``CLOSE_WAIT_S`` seconds
    (``TreeTimeout.unfinished`` says when that was not enough). Any other exception while it waits (KeyboardInterrupt,
    the GPU check's SIGTERM) kills the tree too, then propagates."""
    proc = subprocess.Popen(
        list(args), cwd=cwd, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True)
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            killed = kill_tree(proc.pid)
            out, err, unfinished = finish_killed(proc)
            raise TreeTimeout(list(args), timeout, out, err, killed, unfinished) from None
    except TreeTimeout:
        raise
    except BaseException:  # the caller stops waiting (also while a timeout's kill ran): no process outlives it
        if proc.returncode is None:  # (once reaped, its PID may be another process's)
            kill_tree(proc.pid)
            finish_killed(proc)
        raise
    return subprocess.CompletedProcess(list(args), proc.returncode, out, err)
