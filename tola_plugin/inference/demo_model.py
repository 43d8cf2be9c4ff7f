"""The demo model, wherever the user is: the shipped demo backbone with its shipped TOLA adaptation
(``tola_plugin/assets/demo/backbone/``), merged once into the user's cache and read from there by every later run.

- ``demo_model_path()``: the merged file ``<cache>/demo/TOLA_demo_merged-<digest>.safetensors`` (``<cache>``:
  ``$XDG_CACHE_HOME/tola-plugin``, ``utils/user_cache.py``), built on first use (seconds: the backbone is small)
  from the package's files; ``<digest>`` is theirs, so a package with other demo files builds its own. This is the
  model of ``tola-infer``, ``tola-web`` and ``TOLAPipeline.from_merged()`` when none is given, from any folder.
- ``is_demo_model(path)``: whether a merged file is a model of the demo backbone (its TransOCR, frozen in every TOLA
  model, is the demo backbone's, tensor for tensor), whatever its path or name: the demo model above, ``make
  demo``'s export, or a model trained on the demo backbone (docs/own_data.md). The web page shows its notice for
  these.
"""
import hashlib
import os

from tola_plugin.checkpoints.demo_backbone import (DEMO, demo_adaptation_path, demo_adaptation_record,
                                                   demo_checkpoint_paths)
from tola_plugin.utils.user_cache import cache_path

MERGED_NAME = 'TOLA_demo_merged-{digest}.safetensors'
TRANSOCR_PREFIX = 'transocr.'  # the TransOCR's tensors in a merged file


def _digest(paths) -> str:
    sha = hashlib.sha256()
    for path in paths:
        with open(path, 'rb') as f:
            for block in iter(lambda: f.read(1 << 20), b''):
                sha.update(block)
    return sha.hexdigest()[:16]


def demo_model_path(say=None) -> str:
    """The demo model's merged file in the user's cache, built now when missing (``say``: one line before the build,
    e.g. ``print``)."""
    sources = (*demo_checkpoint_paths(), demo_adaptation_path())
    path = cache_path('demo', MERGED_NAME.format(digest=_digest(sources)))
    if not os.path.isfile(path):
        if say is not None:
            say(f'building the demo model once (the shipped demo backbone + its TOLA adaptation, merged) into {path}')
        from tola_plugin.archs.tola_arch import TOLANet
        network = dict(demo_adaptation_record()['network_g'], backbone_init=DEMO)
        network.pop('type', None)
        net = TOLANet(**network)
        net.load_adaptation_checkpoint(DEMO, what='the demo adaptation')
        net.save_merged(path)
    return path


def is_demo_model(path: str) -> bool:
    """Whether the merged TOLA file ``path`` is a model of the demo backbone: its TransOCR tensors are the demo
    backbone's, every one, equal (a full-size model's differ in shape)."""
    import torch
    from safetensors import safe_open
    with safe_open(demo_checkpoint_paths()[1], framework='pt') as demo:
        reference = {key: demo.get_tensor(key) for key in demo.keys()}
    with safe_open(path, framework='pt') as merged:
        keys = {key[len(TRANSOCR_PREFIX):] for key in merged.keys() if key.startswith(TRANSOCR_PREFIX)}
        if keys != set(reference):
            return False
        return all(torch.equal(merged.get_tensor(TRANSOCR_PREFIX + key), value) for key, value in reference.items())
