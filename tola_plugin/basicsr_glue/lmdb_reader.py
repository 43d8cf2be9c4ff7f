"""The BasicSR glue's LMDB reader: BasicSR's LMDB reader (``LmdbBackend``) checks each LMDB before mapping it
(utils/lmdb_check.py): a truncated ``data.mdb`` is an error naming it, not a SIGBUS at the first read."""
from basicsr.utils.file_client import LmdbBackend

from tola_plugin.utils.lmdb_check import check_lmdb

_original_lmdb_backend_init = LmdbBackend.__init__


def lmdb_backend_init(self, db_paths, *args, **kwargs):
    """Upstream's ``LmdbBackend``, after checking each LMDB."""
    for path in [db_paths] if isinstance(db_paths, str) else list(db_paths):
        check_lmdb(str(path))
    _original_lmdb_backend_init(self, db_paths, *args, **kwargs)


def apply():
    LmdbBackend.__init__ = lmdb_backend_init
