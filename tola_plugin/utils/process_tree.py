"""A command run to its end or killed whole: the command and every process it started, also those that left its
process group (torchrun starts its workers in sessions of their own), so no worker is left holding a GPU's memory
after a timeout. Linux (/proc, read by ``procfs``); standard library only."""
import os
import signal
import subprocess
import time
from typing import Dict, List, Optional, Sequence

from tola_plugin.utils import procfs


class TreeTimeout(subprocess.TimeoutExpired):
    """The command ran past its timeout: it and its descendants were killed (``killed``: their PIDs)."""

    def __init__(self, cmd, timeout, output, stderr, killed: List[int]):
        super().__init__(cmd, timeout, output, stderr)
        self.killed = killed


def children_of() -> Dict[int, List[int]]:
    """{parent PID: [child PIDs]} of every process /proc lists now."""
    tree: Dict[int, List[int]] = {}
    for pid in procfs.pids():
        fields = procfs.stat_fields(pid)
        if fields is not None:  # None: ended while we read
            tree.setdefault(int(fields[1]), []).append(pid)
    return tree


def descendants(pid: int) -> List[int]:
    """Every process below ``pid`` now (children first)."""
    tree, found, todo = children_of(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
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


def run_tree(args: Sequence[str], timeout: float, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
             stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    """``subprocess.run(args, text=True)`` that on timeout kills the command's whole tree (``kill_tree``) and raises
    TreeTimeout with what it printed so far."""
    proc = subprocess.Popen(
        list(args), cwd=cwd, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        killed = kill_tree(proc.pid)
        out, err = proc.communicate()
        raise TreeTimeout(list(args), timeout, out, err, killed) from None
    return subprocess.CompletedProcess(list(args), proc.returncode, out, err)
