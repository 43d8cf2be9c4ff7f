"""Helpers of the reliability tests: the launchers run in this process on an option file, PNG decompression bombs
written with zlib, and a small "disk"."""
import errno
import os
import struct
import sys
import zlib

import pytest
import yaml


def launch(tmp_path, monkeypatch, opt, *flags, module='train'):
    """Run our launcher (``tola_plugin.train`` / ``.test``) in this process on ``opt`` (a dict, or the text of the
    file), written to ``tmp_path/options.yml``, from ``tmp_path``; returns the exit status."""
    path = tmp_path / 'options.yml'
    path.write_text(opt if isinstance(opt, str) else yaml.safe_dump(opt, sort_keys=False), encoding='utf-8')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'argv', [f'tola-{module}', '-opt', str(path), *flags])
    launcher = __import__(f'tola_plugin.{module}', fromlist=['main'])
    with pytest.raises(SystemExit) as exit_info:
        launcher.main()
    return exit_info.value.code


def expect_error(tmp_path, monkeypatch, capsys, opt, *needles, module='train'):
    """``launch``, which must end in one ``error:`` line (no traceback) holding every needle, exit status 2."""
    code = launch(tmp_path, monkeypatch, opt, module=module)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith('error: '), err  # one line, no traceback
    for needle in needles:
        assert needle in err[0], err[0]
    return err[0]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)


def write_png_bomb(path, width: int, height: int, rows=None) -> str:
    """An 8-bit gray PNG declaring ``width`` x ``height`` pixels, all black: ``rows`` rows of zeros in its IDAT (all
    of them by default: a real bomb, 9 megapixels in about 9 KB; fewer: a header that lies about a short file)."""
    comp = zlib.compressobj(9)
    row = b'\x00' * (width + 1)  # filter byte + pixels
    data = b''.join(comp.compress(row) for _ in range(height if rows is None else rows)) + comp.flush()
    header = struct.pack('>IIBBBBB', width, height, 8, 0, 0, 0, 0)
    with open(path, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + _chunk(b'IHDR', header) + _chunk(b'IDAT', data) + _chunk(b'IEND', b''))
    return str(path)


class SmallDisk:
    """A folder that fills up like a small file system: writes through ``open`` to files inside ``folder`` fail with
    ENOSPC (after writing what still fits) once the folder's files would exceed ``capacity`` bytes; removing a file
    frees its space. Install with ``monkeypatch.setattr(builtins, 'open', disk.open)``."""

    def __init__(self, folder, capacity: int, real_open):
        self.folder, self.capacity, self.real_open = os.path.abspath(folder), capacity, real_open

    def used(self) -> int:
        total = 0
        for root, _, files in os.walk(self.folder):
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except FileNotFoundError:
                    pass
        return total

    def open(self, file, mode='r', *args, **kwargs):
        handle = self.real_open(file, mode, *args, **kwargs)
        inside = isinstance(file, (str, os.PathLike)) and os.path.abspath(file).startswith(self.folder + os.sep)
        return _Limited(handle, self) if inside and any(m in mode for m in 'wa+') else handle


class _Limited:
    """A file handle whose ``write`` stops where the disk is full."""

    def __init__(self, handle, disk: SmallDisk):
        self._handle, self._disk = handle, disk

    def write(self, data):
        self._handle.flush()
        room = self._disk.capacity - self._disk.used()
        size = len(data.encode('utf-8') if isinstance(data, str) else data)
        if size > room:
            self._handle.write(data[:max(room, 0)])
            self._handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._handle.write(data)

    def __enter__(self):
        self._handle.__enter__()
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._handle, name)
