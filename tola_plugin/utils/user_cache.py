"""The user's cache folder of tola-plugin: ``$XDG_CACHE_HOME/tola-plugin`` (``~/.cache/tola-plugin`` when the
variable is unset or empty, as the XDG base directory specification says). It holds what is measured or built once
per machine and reused by every run: the bf16 speed measurement and the qualification verdicts of the fast paths
(``runtime/bf16_speed.py``, ``runtime/qualification.py``) and the converted OpenVINO stages of models
(``runtime/openvino_stages.py``). Deleting it is always safe: each entry is measured or built again when needed
(docs/inference.md, "The cache")."""
import os

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
