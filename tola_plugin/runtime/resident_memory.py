"""The two ways the runtime drops resident pages of read-only file mappings that it will rarely
read again (madvise ``MADV_DONTNEED``: a page used again is mapped again, unchanged, from its file):

- ``drop_file_pages``: the pages of one file inside given address ranges, at once (this process, when it releases the
  weights of the stages OpenVINO serves: ``stage_weights.drop_mapped_pages``);
- ``PageTrimmer``: a thread that keeps the weights files OpenVINO maps out of the OpenVINO worker's resident memory.

The OpenVINO worker (``openvino_backend/worker.py``) starts in well under a second because it imports neither torch
nor numpy through the package: keep this module's imports to the standard library and ``utils/procfs``.
"""
import ctypes
import os
import threading
import time
from typing import Iterable, Tuple

from tola_plugin.utils.procfs import mappings, status_bytes

MADV_DONTNEED = 4  # <sys/mman.h> on Linux
WEIGHT_FILES = ('.bin', '.blob')  # the IR's weights, OpenVINO's compiled cache entries


class _Libc:
    """libc's madvise, loaded on first use."""
    madvise = None

    @classmethod
    def dontneed(cls, start: int, length: int) -> bool:
        if cls.madvise is None:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            cls.madvise = libc.madvise
        return cls.madvise(start, length, MADV_DONTNEED) == 0


def drop_file_pages(path: str, ranges: Iterable[Tuple[int, int]]) -> int:
    """Drop this process's resident pages of its mappings of the file ``path`` that lie wholly inside one of
    ``ranges`` ((start, end) addresses); returns the bytes dropped. Only pages of ``path``'s mappings are dropped,
    none of any other memory. Linux only (0 elsewhere)."""
    real = os.path.realpath(path)
    mapped = [(lo, hi) for lo, hi, _, name in mappings() if name == real]
    page, dropped = os.sysconf('SC_PAGE_SIZE'), 0
    for start, end in ranges:
        first, last = -(-start // page) * page, end // page * page  # the whole pages inside the range
        if last > first and any(lo <= first and last <= hi for lo, hi in mapped):
            if _Libc.dontneed(first, last - first):
                dropped += last - first
    return dropped


class PageTrimmer:
    """Keeps the original weights OpenVINO maps from its files out of this process's resident memory, so that it
    holds one copy of each weight: the one its kernels run on.

    OpenVINO maps a weights file read-only (the IR's .bin, or the compiled model's cache blob) and keeps the mapping
    for the compiled model's life, while its convolutions and matmuls run on copies repacked for this CPU: after the
    first inference the mapped pages are rarely read again, yet they stay resident, a second copy of every weight.
    Every ``period`` seconds, when this process's resident file pages grew by ``growth`` bytes, a thread drops its
    pages of those read-only mappings. Written by hand: OpenVINO has no setting for it."""

    def __init__(self, period: float = 0.02, growth: int = 32 << 20):
        self.period, self.growth = period, growth
        self.trimmed = 0

    def start(self) -> 'PageTrimmer':
        self.trimmed = self.rss_file()
        threading.Thread(target=self.run, name='page-trimmer', daemon=True).start()
        return self

    @staticmethod
    def rss_file() -> int:
        """Resident file-backed bytes of this process (0 where the kernel does not say)."""
        try:
            return status_bytes('RssFile')
        except OSError:
            return 0

    def trim(self) -> int:
        """Drop this process's pages of the read-only mappings of weight files; returns the bytes of mappings."""
        dropped = 0
        for start, end, permissions, name in mappings():
            if 'w' not in permissions and name.endswith(WEIGHT_FILES) and _Libc.dontneed(start, end - start):
                dropped += end - start
        return dropped

    def run(self) -> None:
        while True:
            time.sleep(self.period)
            if self.rss_file() > self.trimmed + self.growth:
                self.trim()
                self.trimmed = self.rss_file()
