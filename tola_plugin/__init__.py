"""TOLA: Text-aware One-step Latent Adaptation of DiffTSR, as a BasicSR plugin.

``import tola_plugin`` registers every arch, dataset, loss, metric and model of the package into
BasicSR's registries (and applies the CPU/DDP overrides), so that BasicSR option files can name them. Installed, the
package is imported by its import hook on the first ``import basicsr`` of any process (``tola_plugin_hook.py``).
"""
# isort: off
from tola_plugin import basicsr_glue  # noqa: F401  (first: makes basicsr importable, then patches it)
from tola_plugin import archs, data, losses, metrics, models  # noqa: F401
from tola_plugin.inference import TOLAPipeline  # noqa: F401  (the Python API: docs/restore.md)
from tola_plugin.version import __version__  # noqa: F401
