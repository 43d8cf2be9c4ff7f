"""An LMDB is checked before it is read: LMDB reads its data file through a memory map, and touching a page past the
end of a truncated ``data.mdb`` (a copy cut short, a full disk) is a SIGBUS that kills the process without a word
(exit status 135). ``check_lmdb`` compares the file's size with the pages its newest meta page says are in use, and
turns every other failure to open it into an error naming the file. The package's LMDB reader
(``data/fudanvi_lmdb.py``) and BasicSR's (``LmdbBackend``, patched in ``basicsr_glue.lmdb_reader``) call it before
opening."""
import os

import lmdb


def check_lmdb(path: str) -> None:
    """Raise FileNotFoundError when ``path`` holds no ``data.mdb``, ValueError (naming the file, its size and the size
    it should have) when the file is not an LMDB or is shorter than its header says. An environment this process has
    already opened was checked then, and passes."""
    data = os.path.join(path, 'data.mdb')
    if not os.path.isfile(data):
        raise FileNotFoundError(f'{path} is not an LMDB folder (no data.mdb)')
    size = os.path.getsize(data)
    try:
        env = lmdb.open(path, readonly=True, lock=False, readahead=False, max_readers=1)
    except lmdb.Error as err:
        if 'already open' in str(err):
            return
        raise ValueError(f'{data}: not a readable LMDB ({size:,} bytes; {err}); rebuild it, e.g. with '
                         f'tools/make_lmdb.py') from None
    try:
        needed = (env.info()['last_pgno'] + 1) * env.stat()['psize']  # read from the meta pages (the file's start)
    finally:
        env.close()
    if size < needed:
        raise ValueError(f'{data}: truncated LMDB: {size:,} bytes, but its header says {needed:,} are in use; the '
                         f'file was cut short (an interrupted copy, a full disk): copy or rebuild it again')
