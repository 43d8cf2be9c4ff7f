"""Progress of a long step, the way it is seen: a tqdm bar (elapsed < remaining) on a terminal, and where stderr is
a file or a pipe (a log, CI, ``| tee``) lines as BasicSR's logger writes them, at most one every ``LINE_SECONDS``
plus the first and the last: ``<what>: 3/8 images, 12 s, about 20 s left``. One helper for every wait the package
makes a user sit through (OpenVINO conversion, qualification, folder runs), so none of them is silent. Every note
and line goes out through ``user_text`` (``say``; a file name's control characters escaped).
"""
import sys
import time
from typing import Callable, Optional

from tola_plugin.utils.user_text import say, shown

LINE_SECONDS = 10.0  # a log line at most this often (the first and the last step always)


def _seconds(value: float) -> str:
    value = max(0.0, value)
    return f'{value:.0f} s' if value < 120 else f'{value / 60:.1f} min'


def timing(elapsed: float, done: float, total: float) -> str:
    """'12 s, about 30 s left': the time so far, and the time left at its rate (none before the first step, nor after
    the last)."""
    left = f', about {_seconds(elapsed * (total - done) / done)} left' if 0 < done < total else ''
    return _seconds(elapsed) + left


def step_notes(show: Callable[[str, Optional[float]], None]) -> Callable[[str, int, int], None]:
    """A ``progress`` of ``TOLAPipeline`` (what, windows done, windows in all) that hands ``show`` its text and the
    fraction done (None while unknown): 'finding the text lines (PP-OCRv4)', '12 text line(s) found (18 windows of
    128x512)', then '3 of 12 line(s) restored, 9 s, about 27 s left' (timed from the last note with nothing done)."""
    start = time.perf_counter()

    def report(what: str, done: int, total: int) -> None:
        nonlocal start
        if not done:
            start = time.perf_counter()
            show(what, 0.0 if total else None)
        else:
            show(f'{what}, {timing(time.perf_counter() - start, done, total)}', done / total)

    return report


class Progress:
    """``with Progress('OpenVINO conversion', total=5, unit='stages') as bar: ... bar.update(1, 'idm')``.

    total: the steps (or any additive amount: parameters, pixels); the remaining time is the elapsed time scaled by
    what is left, so steps of unequal cost may be weighted (``update(weight)``). stream: stderr by default; a
    terminal gets a tqdm bar, anything else lines (at most one every ``line_seconds``, default LINE_SECONDS).
    ``note``: the step just done, shown beside the count."""

    def __init__(self, what: str, total: float, unit: str = 'steps', stream=None, line_seconds: Optional[float] = None):
        self.what, self.total, self.unit = what, float(total), unit
        self.stream = stream or sys.stderr
        self.line_seconds = LINE_SECONDS if line_seconds is None else line_seconds
        self.done = 0.0
        self.start = time.perf_counter()
        self._last_line = None
        self._bar = None
        if _is_terminal(self.stream):
            from tqdm import tqdm
            counts = '' if unit == '%' else ' {n_fmt}/{total_fmt} {unit}'
            self._bar = tqdm(
                total=total, desc=what, unit=unit, file=self.stream, dynamic_ncols=True,
                bar_format='{desc}: {percentage:3.0f}%|{bar}|' + counts + ' [{elapsed}<{remaining}]{postfix}')

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def update(self, amount: float = 1, note: str = '') -> None:
        self.done = min(self.total, self.done + amount)
        note = shown(note)
        if self._bar is not None:
            if note:
                self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(amount)
            return
        now = time.perf_counter()
        last = self.done >= self.total
        if self._last_line is not None and not last and now - self._last_line < self.line_seconds:
            return
        self._last_line = now
        count = (f'{100 * self.done / self.total:.0f} %'
                 if self.unit == '%' else f'{self.done:g}/{self.total:g} {self.unit}')
        note = f' ({note})' if note else ''
        say(f'{self.what}: {count}{note}, {timing(now - self.start, self.done, self.total)}', self.stream)

    def write(self, message: str) -> None:
        """A line of its own that does not break the bar (``say`` writes above it)."""
        say(message, self.stream)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
