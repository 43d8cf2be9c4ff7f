"""TOLA: Text-aware One-step Latent Adaptation of DiffTSR, as a BasicSR plugin.

``import tola_plugin`` is light (standard library only): the plugin registers itself into BasicSR when basicsr is
first imported in the process, or at once when it already is (``register``: the plugin's changes to BasicSR,
``basicsr_glue/``, then every arch, dataset, loss, metric and model of the package announced in BasicSR's registries,
``registry_index.py``, so that BasicSR option files can name them; the module defining one is imported when BasicSR
first builds it, so registering stays light too: no diffusers, peft, lpips, ...). So the package's light parts (the
tools' planning and checks, ``utils/``) answer without importing torch or basicsr, and every ``import basicsr`` of the
process, by the package or anyone, finds the plugin registered. Installed, the package is also registered by its
import hook on the first ``import basicsr`` of any process (``tola_plugin_hook.py``). ``tola_plugin.TOLAPipeline``
is the Python API (docs/restore.md), imported on first use.
"""

import tola_plugin_shim
from tola_plugin.version import __version__  # noqa: F401

_REGISTRATION = []  # ['started'] once ``register`` began: it runs once per process


def register() -> None:
    """Register the plugin into BasicSR (once; a second call, or one while it runs, does nothing): BasicSR's fixes
    (``basicsr_glue``: the torchvision shim, then basicsr and its patches), then TOLA's names in its registries."""
    if _REGISTRATION:
        return
    _REGISTRATION.append('started')  # first: importing the glue imports basicsr, whose finder calls register again
    from tola_plugin import basicsr_glue  # noqa: F401  (first: makes basicsr importable, then patches it)
    from tola_plugin.basicsr_glue.registry_lookup import announce_index
    from tola_plugin.registry_index import REGISTRY_INDEX
    announce_index(REGISTRY_INDEX)


if not tola_plugin_shim.after_basicsr_import(register):  # basicsr already imported: register now
    register()


def __getattr__(name):
    """``tola_plugin.TOLAPipeline``, imported when first asked for (it imports the networks: diffusers, peft)."""
    if name == 'TOLAPipeline':
        from tola_plugin.inference import TOLAPipeline
        return TOLAPipeline
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
