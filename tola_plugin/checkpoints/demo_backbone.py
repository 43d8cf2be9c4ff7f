"""Where the small demo backbone's weight files are: ``tola_plugin/assets/demo/backbone/``, shipped inside the package
(trained here by tools/train_demo_backbone.py, ``tola_lab.demo.training``).

Files (package data, so an installed package has them too):
- ``difftsr_demo.safetensors``: IDM, VAE and MoM in our layout (``tools/convert_difftsr.py``'s format, read by
  ``load_difftsr``), with their configs in the metadata;
- ``transocr_demo.safetensors``: TransOCR (``save_transocr``'s format, architecture in the metadata);
- ``manifest.json``: how they were made (command, seed, iterations, final losses, held-out scores, wall time);
- ``tola_demo_adaptation.pth``: the demo model's TOLA adaptation (LoRA + LRC) of this backbone, ``make demo``'s
  ``net_g_latest.pth`` (TOLAModel's adaptation-checkpoint format); ``tola_demo_adaptation.json``: how it was made,
  its ``network_g`` and its held-out scores.

Option files select the backbone with ``backbone_init: demo`` (TOLANet) and the adaptation with
``pretrain_network_g: demo`` (both need no path). docs/demo_backbone.md.
"""
import json
import os
from typing import Dict, Tuple

DIFFTSR_FILE = 'difftsr_demo.safetensors'
TRANSOCR_FILE = 'transocr_demo.safetensors'
MANIFEST_FILE = 'manifest.json'
ADAPTATION_FILE = 'tola_demo_adaptation.pth'
ADAPTATION_RECORD = 'tola_demo_adaptation.json'
DEMO = 'demo'  # the value that names a demo file in an option (backbone_init, ocr_recognizer, ...)


def demo_backbone_dir() -> str:
    """The folder of the shipped files: ``tola_plugin/assets/demo/backbone/`` (package data, found beside this package's
    modules without importing the demo code)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'assets', 'demo', 'backbone')


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


def demo_adaptation_path() -> str:
    """The shipped adaptation checkpoint of the demo model; FileNotFoundError naming it and how to make it."""
    path = os.path.join(demo_backbone_dir(), ADAPTATION_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'demo adaptation file {path!r} is missing (it ships with the package; make it again '
                                f'with `make demo` and copy experiments/demo_TOLA/models/net_g_latest.pth there)')
    return path


def demo_adaptation_record() -> Dict:
    """How the shipped adaptation was made: command, threads, iterations, seconds, machine, its ``network_g`` (the
    network it adapts) and its held-out scores."""
    with open(os.path.join(demo_backbone_dir(), ADAPTATION_RECORD), encoding='utf-8') as f:
        return json.load(f)


def adaptation_file(value) -> str:
    """The adaptation checkpoint an option names: a path, or ``demo`` (the shipped demo adaptation:
    ``path.pretrain_network_g``, ``--checkpoint`` of tola-infer and tola-export-merged)."""
    return demo_adaptation_path() if value == DEMO else str(value)


def transocr_file(value) -> str:
    """The TransOCR file an option names: a path, or ``demo`` (the demo backbone's TransOCR; every option that takes a
    TransOCR file takes it: ``train.ocr_recognizer``, ``tola-evaluate --transocr-checkpoint``)."""
    return demo_checkpoint_paths()[1] if value == DEMO else str(value)


def demo_manifest() -> Dict:
    """The manifest (how the files were made)."""
    with open(os.path.join(demo_backbone_dir(), MANIFEST_FILE), encoding='utf-8') as f:
        return json.load(f)
