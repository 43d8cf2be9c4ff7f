"""Rendered low-resolution text lines and a photo, examples for tola-infer and the web demo (README.md here)."""
import os
from importlib import resources
from typing import List


def samples_dir() -> str:
    """The folder holding the sample PNGs (package data)."""
    return str(resources.files(__name__))


def sample_paths() -> List[str]:
    """Absolute paths of the sample PNGs, sorted by name."""
    folder = samples_dir()
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith('.png'))
