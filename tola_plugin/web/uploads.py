"""What the web page stores, bounded in all (``Store``), in a folder of its server's own (``tola-web-<pid>-*`` in the
temporary folder, Gradio's temporary folder while the page lives: ``own_temp_folder``), removed when the server stops
and, if its process was killed, by the next server's start (``remove_stale_upload_folders``)."""
import atexit
import contextlib
import glob
import hashlib
import os
import shutil
import tempfile
import threading
import time
from typing import Dict, Iterable, List, Optional, Set, Tuple

import numpy as np

from tola_plugin.data.image_io import encode_image, write_file_bytes
from tola_plugin.utils.procfs import pid_alive

STORED_UPLOADS_MAX_MB = 200.0  # everything the server stores at once (uploads, shown images, the page's own files)
#: an upload not yet restored is removed to make room only after waiting this long (seconds); younger ones are kept and
#: what does not fit is refused
PENDING_MAX_AGE_S = 600.0
UPLOADS_PREFIX = 'tola-web-'


def stored_files(folder: str) -> List[Tuple[float, int, str]]:
    """(modification time, size, path) of every file under ``folder``, oldest first."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            found.append((st.st_mtime, st.st_size, path))
    return sorted(found)


class StoreFull(ValueError):
    """What the store holds that may not be removed leaves no room (``Store.make_room``)."""


class Store:
    """Everything the server keeps in its ``folder`` (Gradio's temporary folder: uploads, the images the page shows,
    the page's own copies of the examples), bounded in all by ``max_bytes``. Room is made by removing, oldest first,
    what is finished (the images shown, uploads already restored), then uploads that waited more than
    PENDING_MAX_AGE_S for their restoration; never the page's own files or a younger upload: what does not fit then is
    refused (StoreFull). ``clock``: the time file times are compared with (tests inject it)."""

    def __init__(self, folder: str, max_mb: float = STORED_UPLOADS_MAX_MB, clock=time.time):
        self.folder, self.max_bytes, self.clock = os.path.realpath(folder), int(max_mb * 2**20), clock
        self.page = frozenset(path for _, _, path in stored_files(folder))  # the examples' copies, made at start
        self.finished: Set[str] = set()
        self.incoming = 0  # the Content-Length of uploads being read (reserve): not yet stored, already counted
        self.lock = threading.Lock()

    def used(self) -> int:
        """Bytes stored and reserved."""
        return sum(size for _, size, _ in stored_files(self.folder)) + self.incoming

    def make_room(self, size: int, keep: Iterable[str] = ()) -> None:
        """Remove finished files, then uploads older than PENDING_MAX_AGE_S (oldest first; not ``keep``) until
        ``size`` more bytes fit; StoreFull when they do not."""
        with self.lock:
            files = stored_files(self.folder)
            total = sum(size for _, size, _ in files) + self.incoming
            expired, keep = self.clock() - PENDING_MAX_AGE_S, set(keep) | self.page
            removable = sorted((path not in self.finished, mtime, size, path) for mtime, size, path in files
                               if path not in keep and (path in self.finished or mtime < expired))
            for _, _, bytes_, path in removable:
                if total + size <= self.max_bytes:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                total -= bytes_
                self.finished.discard(path)
            for root, dirs, _ in os.walk(self.folder, topdown=False):  # the folders made per file, now empty
                for name in dirs:
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(root, name))
            if total + size > self.max_bytes:
                raise StoreFull(f'{size / 2**20:.2f} MB more do not fit: the server stores {total / 2**20:.2f} MB of '
                                f'uploads not yet restored and its own files, its bound is {self.max_bytes / 2**20:g} '
                                f'MB (tola-web --max-stored-mb); an upload is kept {PENDING_MAX_AGE_S / 60:g} minutes '
                                'for its restoration: try again later')

    def reserve(self, size: int) -> None:
        """Make room for an upload of ``size`` bytes and count them until ``release``."""
        self.make_room(size)
        with self.lock:
            self.incoming += size

    def release(self, size: int) -> None:
        with self.lock:
            self.incoming -= size

    def save_images(self, images: Dict[str, Optional[np.ndarray]], keep: str = '') -> Dict[str, Optional[str]]:
        """Write each RGB image (None: none) as PNG into the folder (``<sha256>/<name>.png``), room made for them first
        (``keep``: the upload they come from) -> name: path. They are finished: the page has shown them."""
        encoded = {
            name: encode_image(rgb, '.png', name, order='RGB')
            for name, rgb in images.items() if rgb is not None
        }
        paths = {
            name: os.path.join(self.folder,
                               hashlib.sha256(data).hexdigest(), f'{name}.png')
            for name, data in encoded.items()
        }
        new = sum(len(data) for name, data in encoded.items() if not os.path.exists(paths[name]))
        self.make_room(new, [os.path.realpath(keep)])
        for name, data in encoded.items():
            write_file_bytes(paths[name], data)
            with self.lock:
                self.finished.add(paths[name])
        return {name: paths.get(name) for name in images}

    def finish(self, path: str) -> None:
        """The upload ``path`` was restored: it may be removed to make room."""
        with self.lock:
            if os.path.realpath(path) not in self.page:
                self.finished.add(os.path.realpath(path))

    def check_present(self, path: str, name: str) -> None:
        """A ValueError saying why, when the upload ``path`` of this folder was removed to make room."""
        if os.path.dirname(os.path.dirname(os.path.realpath(path))) == self.folder and not os.path.exists(path):
            raise ValueError(f'{name} is no longer on the server: it was removed to make room for newer uploads '
                             f'(the server keeps at most {self.max_bytes / 2**20:g} MB: tola-web --max-stored-mb; an '
                             'upload goes once restored, or after waiting '
                             f'{PENDING_MAX_AGE_S / 60:g} minutes when room is needed); upload it again')


def remove_stale_upload_folders() -> None:
    """Upload folders of tola-web servers whose process is gone (killed before it could clean up)."""
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), f'{UPLOADS_PREFIX}*-*')):
        pid = os.path.basename(folder)[len(UPLOADS_PREFIX):].split('-')[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def own_temp_folder():
    """A new folder for this page's uploads and Gradio's copies of its images, Gradio's temporary folder from now
    on (``GRADIO_TEMP_DIR``: Gradio's app and each component read it when they are made); removed at exit at the
    latest. -> (folder, the previous GRADIO_TEMP_DIR)."""
    remove_stale_upload_folders()
    folder = tempfile.mkdtemp(prefix=f'{UPLOADS_PREFIX}{os.getpid()}-')
    atexit.register(shutil.rmtree, folder, True)
    previous = os.environ.get('GRADIO_TEMP_DIR')
    os.environ['GRADIO_TEMP_DIR'] = folder
    return folder, previous
