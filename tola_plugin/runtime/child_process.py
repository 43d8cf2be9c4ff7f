"""Running a piece of third-party code in a child process, so that a crash, a hang or a runaway there is a message
here, never the end of the user's process: one place that starts the children of the runtime decision, bounds them
in time and says how they ended."""
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

TAIL = 600  # characters of a failed child's stderr kept in its message

#: signals that come from outside a child, never from its own code: the OOM killer and container limits (SIGKILL),
#: a user or a service manager (SIGTERM, SIGINT, SIGHUP, SIGQUIT). A child that crashes sends itself SIGSEGV, SIGBUS,
#: SIGILL, SIGFPE or SIGABRT instead.
OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})


class ChildFailure(RuntimeError):
    """A child process that did not finish its job: ``how`` says why in a few words (died by SIGSEGV, hung past
    600 s, exit status 1: ...); ``returncode``: the child's, where it died (negative: the signal), else None."""

    def __init__(self, what: str, how: str, returncode: Optional[int] = None):
        super().__init__(f'{what}: {how}')
        self.what, self.how, self.returncode = what, how, returncode

    @property
    def killed_from_outside(self) -> bool:
        """Whether the child died by a signal of OUTSIDE_SIGNALS: ended by its surroundings, not by its own code (no
        verdict on what it ran)."""
        return self.returncode is not None and -self.returncode in OUTSIDE_SIGNALS

    def __reduce__(self):  # raised in a pool's child (the benchmark's memory runs), it must reach the parent whole
        return type(self), (self.what, self.how, self.returncode)


def python_command(script: Optional[str] = None, module: Optional[str] = None) -> List[str]:
    """This interpreter running ``script`` (a file; ``child_environment`` keeps the file's folder off sys.path) or
    ``module`` (``-m``), unbuffered."""
    if (script is None) == (module is None):
        raise ValueError('python_command: give a script or a module')
    return [sys.executable, '-u', script] if script else [sys.executable, '-u', '-m', module]


def child_environment(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of a child: ours, a script's own folder not on its path (PYTHONSAFEPATH), ``extra`` on top."""
    env = dict(os.environ, PYTHONSAFEPATH='1')
    env.update(extra or {})
    return env


def describe_exit(returncode: int, stderr: str = '') -> str:
    """How a child ended, in words: 'died by SIGSEGV (signal 11)' or 'exit status 2: <last lines of stderr>'."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f'signal {-returncode}'
        return f'died by {name} (signal {-returncode})'
    tail = stderr.strip()[-TAIL:]
    return f'exit status {returncode}' + (f': {tail}' if tail else '')


@dataclass
class ChildResult:
    stdout: str
    stderr: str
    seconds: float


def run_child(command: Sequence[str], what: str, timeout: float, env: Optional[Dict[str, str]] = None,
              cwd: Optional[str] = None, on_line: Optional[Callable[[str], None]] = None) -> ChildResult:
    """Run ``command`` to its end within ``timeout`` seconds; -> its output. A child that dies by a signal, exits
    with a non-zero status or runs past the timeout (killed by a timer) raises ChildFailure naming ``what`` and how.
    ``on_line``: called with each line of the child's stdout as it comes (its progress), not only at the end; its
    stderr is collected by a thread, so that neither pipe fills."""
    import threading
    import time
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_environment(env), cwd=cwd,
        stdin=subprocess.DEVNULL)
    errors: List[str] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line.rstrip('\n'))
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join()
    stderr = ''.join(errors)
    if time.perf_counter() - start >= timeout and proc.returncode != 0:
        raise ChildFailure(what, f'hung: still running after {timeout:g} s, killed')
    if proc.returncode != 0:
        raise ChildFailure(what, describe_exit(proc.returncode, stderr), proc.returncode)
    return ChildResult(''.join(lines), stderr, time.perf_counter() - start)
