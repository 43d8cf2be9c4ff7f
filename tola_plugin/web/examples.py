"""The examples of the web demo: every PNG of the sample packages, so a sample added there appears in the demo.

``tola_plugin.assets.rendered_samples`` (rendered lines and a photo) always ships; ``tola_plugin.assets.samples`` (real
low-res lines of DiffTSR's test set) when installed.
"""
import importlib.util
from typing import List, Sequence

from tola_plugin.data.sample_images import sample_paths

SAMPLE_PACKAGES = ('tola_plugin.assets.samples', 'tola_plugin.assets.rendered_samples')  # real lines first


def example_paths(packages: Sequence[str] = SAMPLE_PACKAGES) -> List[str]:
    """Absolute paths of the sample images of ``packages`` (``data.sample_images.sample_paths``), in that order; a
    package that is not installed is left out."""
    return [path for name in packages if importlib.util.find_spec(name) is not None for path in sample_paths(name)]
