"""TOLA: Text-aware One-step Latent Adaptation of DiffTSR, as a BasicSR plugin.

``import tola_plugin`` applies the plugin's changes to BasicSR (``basicsr_glue/``) and announces every arch, dataset,
loss, metric and model of the package in BasicSR's registries (``registry_index.py``), so that BasicSR option files
can name them; the module defining one is imported when BasicSR first builds it, so the import itself stays light
(no diffusers, peft, lpips, ...). Installed, the package is imported by its import hook on the first ``import
basicsr`` of any process (``tola_plugin_hook.py``). ``tola_plugin.TOLAPipeline`` is the Python API
(docs/restore.md), imported on first use.
"""
# isort: off
from tola_plugin import basicsr_glue  # noqa: F401  (first: makes basicsr importable, then patches it)
from tola_plugin.basicsr_glue.registry_lookup import announce_index
from tola_plugin.registry_index import REGISTRY_INDEX
from tola_plugin.version import __version__  # noqa: F401

announce_index(REGISTRY_INDEX)


def __getattr__(name):
    """``tola_plugin.TOLAPipeline``, imported when first asked for (it imports the networks: diffusers, peft)."""
    if name == 'TOLAPipeline':
        from tola_plugin.inference import TOLAPipeline
        return TOLAPipeline
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
