"""The sample images shipped as package data, read in one place: ``tola_plugin.assets.samples`` (real low-resolution
lines of DiffTSR's test set, with labels) and ``tola_plugin.assets.rendered_samples`` (rendered lines and a photo).
Each holds only its files; its ``samples_dir``, ``sample_paths`` (``sample_labels``) are these functions bound to it."""
import os
from importlib import resources
from typing import Dict, List

from tola_plugin.data.text_labels import read_labels_tsv


def sample_folder(package: str) -> str:
    """The folder of the sample package ``package`` (e.g. 'tola_plugin.assets.samples')."""
    return str(resources.files(package))


def sample_paths(package: str) -> List[str]:
    """Absolute paths of the PNGs of the sample package ``package``, sorted by name."""
    folder = sample_folder(package)
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith('.png'))


def sample_labels(package: str) -> Dict[str, str]:
    """{file name: transcription} of the sample package ``package`` (its labels.tsv)."""
    return dict(read_labels_tsv(os.path.join(sample_folder(package), 'labels.tsv')))
