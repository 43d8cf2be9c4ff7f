"""The torchvision shim basicsr 1.4.2 needs, in a top-level module of its own (standard library only until called):
the import hook (``tola_plugin_hook``) runs it before basicsr's first import, and ``tola_plugin.basicsr_glue`` runs it
when the package is imported without the hook. Neither imports the other for it: both arrows point down here.
"""
import sys

_OLD_TORCHVISION_MODULE = 'torchvision.transforms.functional_tensor'


def install_torchvision_shim():
    """Register ``torchvision.transforms.functional_tensor`` if torchvision no longer has it.

    basicsr 1.4.2 (the last PyPI release) imports it; torchvision removed it in 0.17 (fixed upstream after the
    release, never published). It is aliased to its private successor, or to a minimal stand-in exposing the
    one function basicsr uses.
    """
    if _OLD_TORCHVISION_MODULE in sys.modules:
        return
    try:
        import torchvision.transforms.functional_tensor  # noqa: F401  (old torchvision: nothing to do)
        return
    except ImportError:
        pass
    try:
        from torchvision.transforms import _functional_tensor as module
    except ImportError:
        import types

        from torchvision.transforms.functional import rgb_to_grayscale
        module = types.ModuleType(_OLD_TORCHVISION_MODULE)
        module.rgb_to_grayscale = rgb_to_grayscale
    sys.modules[_OLD_TORCHVISION_MODULE] = module
