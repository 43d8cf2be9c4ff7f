"""Registers tola-plugin into BasicSR in every process of the environment it is installed in.

The installed ``tola_plugin_hook.pth`` (setup.py) runs ``install()`` at interpreter start. That only puts a finder
on ``sys.meta_path`` (standard library only: nothing heavy is imported at start). When the process first imports
``basicsr``, the finder steps aside and
  1. installs the torchvision shim (``tola_plugin_shim``), so that basicsr 1.4.2's own imports work on torchvision
     >= 0.17;
  2. lets basicsr import itself as usual;
  3. imports ``tola_plugin``: BasicSR's fixes (``tola_plugin/basicsr_compat.py``) and TOLA's archs, datasets,
     losses, metrics and models in BasicSR's registries.
So ``python basicsr/train.py``, ``python -m basicsr.train``, ``torchrun ... basicsr/train.py --launcher pytorch``
and any ``import basicsr`` see the plugin. ``TOLA_PLUGIN_HOOK=0`` (or off, false, no) turns the hook off.
"""
import os
import sys

ENV_VAR = 'TOLA_PLUGIN_HOOK'
_OFF, _ON = ('0', 'off', 'false', 'no'), ('', '1', 'on', 'true', 'yes')


def hook_enabled(environ=os.environ) -> bool:
    """Whether ``TOLA_PLUGIN_HOOK`` leaves the hook on (unset, 1, on, true, yes) or turns it off (0, off, false,
    no). Any other value keeps it on and says so on stderr (start-up must not fail over a typo)."""
    value = environ.get(ENV_VAR, '').strip().lower()
    if value in _OFF:
        return False
    if value not in _ON:
        print(f'tola_plugin_hook: ignoring {ENV_VAR}={environ[ENV_VAR]!r} (expected 1/on or 0/off); the hook stays on',
              file=sys.stderr)
    return True


class _RegisteringLoader:
    """Runs basicsr's own loader between the torchvision shim and the plugin's import."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # imported here, not at the top: at interpreter start the hook imports nothing but the standard library
        from tola_plugin_shim import install_torchvision_shim
        install_torchvision_shim()
        # basicsr's resources and metadata are read through its own loader, as without the hook
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            import tola_plugin  # noqa: F401  (BasicSR fixes, then TOLA's classes into the registries)
        except Exception as err:
            raise ImportError(f'tola-plugin could not register itself into BasicSR: {err!r}; set {ENV_VAR}=0 to import '
                              f'basicsr without the plugin') from err


class BasicSRFinder:
    """``sys.meta_path`` finder that answers only for ``basicsr``, once; the spec is the one the other finders
    give, with its loader wrapped in ``_RegisteringLoader``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != 'basicsr':
            return None
        uninstall()  # one shot, and no recursion when the plugin imports basicsr
        for finder in sys.meta_path:
            find_spec = getattr(finder, 'find_spec', None)
            spec = find_spec(fullname, path, target) if find_spec else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, 'exec_module'):
                    spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


def installed() -> bool:
    """Whether the finder waits for basicsr's first import in this process."""
    return any(isinstance(f, BasicSRFinder) for f in sys.meta_path)


def install():
    """Called by tola_plugin_hook.pth at interpreter start: wait for basicsr's first import (unless basicsr is
    already imported or the hook is turned off)."""
    if 'basicsr' in sys.modules or installed() or not hook_enabled():
        return
    sys.meta_path.insert(0, BasicSRFinder())


def uninstall():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, BasicSRFinder)]
