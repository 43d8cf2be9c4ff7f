"""Make basicsr 1.4.2 importable on today's torchvision; must run before any ``import basicsr``.

basicsr 1.4.2 (the last PyPI release) imports ``torchvision.transforms.functional_tensor``, which
torchvision removed in 0.17 (fixed upstream after the release, never published). We alias the
module to its private successor, or to a minimal stand-in exposing the one function basicsr uses.
"""
import sys
import types

_OLD = 'torchvision.transforms.functional_tensor'


def install_torchvision_shim():
    """Register ``torchvision.transforms.functional_tensor`` if torchvision no longer has it."""
    if _OLD in sys.modules:
        return
    try:
        import torchvision.transforms.functional_tensor  # noqa: F401  (old torchvision: nothing to do)
        return
    except ImportError:
        pass
    try:
        from torchvision.transforms import _functional_tensor as module
    except ImportError:
        from torchvision.transforms.functional import rgb_to_grayscale
        module = types.ModuleType(_OLD)
        module.rgb_to_grayscale = rgb_to_grayscale
    sys.modules[_OLD] = module


install_torchvision_shim()
