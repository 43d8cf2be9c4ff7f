"""The user's cache folder of tola-plugin: ``$XDG_CACHE_HOME/tola-plugin`` (``~/.cache/tola-plugin`` when the
variable is unset or empty, as the XDG base directory specification says). It holds what is measured or built once
per machine and reused by every run: the bf16 speed measurement and the qualification verdicts of the fast paths
(``runtime/bf16_speed.py``, ``runtime/qualification.py``) and the converted OpenVINO stages of models
(``runtime/openvino_backend/stages.py``). Deleting it is always safe: each entry is measured or built again when needed
(docs/inference.md, "The cache"). ``JsonCache`` is the one way an entry is kept there in JSON."""
import os
from typing import Dict, Iterable, Optional

from tola_plugin.utils.atomic_files import read_json_dict, write_json

APP = 'tola-plugin'


def cache_root() -> str:
    """The cache folder (not created): ``$XDG_CACHE_HOME/tola-plugin``, or ``~/.cache/tola-plugin``. A relative
    XDG_CACHE_HOME is ignored, as the specification asks."""
    base = os.environ.get('XDG_CACHE_HOME', '')
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, APP)


def cache_path(*parts: str) -> str:
    """A path inside the cache folder, its parent folder created."""
    path = os.path.join(cache_root(), *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


class JsonCache:
    """Entries measured or built once per machine, kept in one JSON file of the cache folder (``name``: {'format':
    ``format``, 'entries': {key: value}}, written atomically) and in this process's memory. A missing, unreadable,
    oversized (``max_bytes``: refused from its size, unread) or foreign file reads as empty and the next ``put``
    rewrites it; where the folder cannot be made or written, the entries live in this process only."""

    def __init__(self, name: str, format: str, max_bytes: int = 1 << 20):
        self.name, self.format, self.max_bytes = name, format, max_bytes
        self.memory: Dict[str, object] = {}

    def path(self) -> str:
        return cache_path(self.name)

    def entries(self) -> Dict[str, object]:
        """The file's entries ({} when it cannot be read or is not of this format)."""
        try:
            data = read_json_dict(self.path(), self.max_bytes)
        except OSError:  # the cache folder cannot be made
            data = None
        entries = data.get('entries') if data and data.get('format') == self.format else None
        return dict(entries) if isinstance(entries, dict) else {}

    def get(self, key: str) -> Optional[object]:
        """This process's entry of ``key``, else the file's; None when neither has one."""
        return self.memory[key] if key in self.memory else self.entries().get(key)

    def put(self, key: str, value) -> bool:
        """Keep ``value`` for ``key`` here and in the file; False when the file cannot be written."""
        self.memory[key] = value
        entries = self.entries()
        entries[key] = value
        return self._write(entries)

    def drop(self, keys: Iterable[str]) -> None:
        """Forget ``keys`` here and in the file."""
        keys = set(keys)
        for key in keys:
            self.memory.pop(key, None)
        self._write({k: v for k, v in self.entries().items() if k not in keys})

    def _write(self, entries: Dict) -> bool:
        try:
            write_json(self.path(), {'format': self.format, 'entries': entries})
        except OSError:  # a read-only cache: this process remembers, the next measures again
            return False
        return True
