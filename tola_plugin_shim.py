"""The torchvision shim basicsr 1.4.2 needs, in a top-level module of its own (standard library only until called),
and the one finder that waits for basicsr's first import (``after_basicsr_import``): it runs the shim before basicsr's
code and its callbacks right after it. The import hook (``tola_plugin_hook``) and ``tola_plugin`` itself register
the plugin through it (``tola_plugin.register``), and ``tola_plugin.basicsr_glue`` runs the shim when basicsr is
imported without the finder. Neither imports the other for it: every arrow points down here.
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


class _ShimmedLoader:
    """basicsr's own loader, with the torchvision shim run before it and ``BasicSRFinder.after`` called after it."""

    def __init__(self, loader, after):
        self.loader, self.after = loader, after

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        install_torchvision_shim()
        # basicsr's resources and metadata are read through its own loader, as without the finder
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        for callback in self.after:
            callback()


class BasicSRFinder:
    """``sys.meta_path`` finder that answers only for ``basicsr``, once: the spec the other finders give, with its
    loader wrapped so that the torchvision shim runs before basicsr's code and each callback of ``after`` (in order)
    right after it, inside ``import basicsr``."""

    def __init__(self, after=()):
        self.after = list(after)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != 'basicsr':
            return None
        stop_waiting()  # one shot, and no recursion when a callback imports basicsr
        for finder in sys.meta_path:
            find_spec = getattr(finder, 'find_spec', None)
            spec = find_spec(fullname, path, target) if find_spec else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, 'exec_module'):
                    spec.loader = _ShimmedLoader(spec.loader, self.after)
                return spec
        return None


def waiting_finder():
    """The finder waiting for basicsr's first import in this process, or None."""
    return next((f for f in sys.meta_path if isinstance(f, BasicSRFinder)), None)


def stop_waiting():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, BasicSRFinder)]


def after_basicsr_import(callback) -> bool:
    """Call ``callback()`` right after basicsr's first import in this process, the torchvision shim run before it (one
    finder for every caller: the import hook and ``tola_plugin``). -> False, calling nothing, when basicsr is already
    imported (the caller acts itself)."""
    if 'basicsr' in sys.modules:
        return False
    finder = waiting_finder()
    if finder is None:
        finder = BasicSRFinder()
        sys.meta_path.insert(0, finder)
    if callback not in finder.after:
        finder.after.append(callback)
    return True
