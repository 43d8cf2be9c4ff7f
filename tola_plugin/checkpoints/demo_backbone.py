"""Where the small demo backbone's weight files are: ``tola_plugin/demo/backbone/``, shipped inside the package
(trained here by tools/train_demo_backbone.py, ``tola_plugin.demo.training``).

Files (package data, so an installed package has them too):
- ``difftsr_demo.safetensors``: IDM, VAE and MoM in our layout (``tools/convert_difftsr.py``'s format, read by
  ``load_difftsr``), with their configs in the metadata;
- ``transocr_demo.safetensors``: TransOCR (``save_transocr``'s format, architecture in the metadata);
- ``manifest.json``: how they were made (command, seed, iterations, final losses, held-out scores, wall time).

Option files select it with ``backbone_init: demo`` (TOLANet), which needs no path. docs/demo_backbone.md.
"""
import json
import os
from typing import Dict, Tuple

DIFFTSR_FILE = 'difftsr_demo.safetensors'
TRANSOCR_FILE = 'transocr_demo.safetensors'
MANIFEST_FILE = 'manifest.json'
DEMO = 'demo'  # the value that names a demo file in an option (backbone_init, ocr_recognizer, ...)


def demo_backbone_dir() -> str:
    """The folder of the shipped files: ``tola_plugin/demo/backbone/`` (package data, found beside this package's
    modules without importing the demo code)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'demo', 'backbone')


def demo_checkpoint_paths() -> Tuple[str, str]:
    """(DiffTSR modules file, TransOCR file) of the demo backbone; FileNotFoundError naming the missing file and
    how to make it."""
    folder = demo_backbone_dir()
    paths = (os.path.join(folder, DIFFTSR_FILE), os.path.join(folder, TRANSOCR_FILE))
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f'demo backbone file {path!r} is missing (it ships with the package; '
                                    f'rebuild it with: python tools/train_demo_backbone.py -opt '
                                    f'options/demo/train_demo_backbone.yml)')
    return paths


def transocr_file(value) -> str:
    """The TransOCR file an option names: a path, or ``demo`` (the demo backbone's TransOCR; every option that takes a
    TransOCR file takes it: ``train.ocr_recognizer``, ``tola-evaluate --transocr-checkpoint``)."""
    return demo_checkpoint_paths()[1] if value == DEMO else str(value)


def demo_manifest() -> Dict:
    """The manifest (how the files were made)."""
    with open(os.path.join(demo_backbone_dir(), MANIFEST_FILE), encoding='utf-8') as f:
        return json.load(f)
