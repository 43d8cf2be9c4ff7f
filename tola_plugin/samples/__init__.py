"""Six real low-resolution text lines from DiffTSR's test set (Apache-2.0; README.md in this folder)."""
import os
from importlib import resources
from typing import Dict, List

from tola_plugin.data.text_labels import read_labels_tsv


def samples_dir() -> str:
    """The folder holding the sample PNGs (package data)."""
    return str(resources.files(__name__))


def sample_paths() -> List[str]:
    """Absolute paths of the sample PNGs, sorted by name."""
    folder = samples_dir()
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith('.png'))


def sample_labels() -> Dict[str, str]:
    """{file name: transcription read from the image} (not official ground truth)."""
    return dict(read_labels_tsv(os.path.join(samples_dir(), 'labels.tsv')))
