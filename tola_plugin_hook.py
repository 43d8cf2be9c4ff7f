"""Registers tola-plugin into BasicSR in every process of the environment it is installed in.

The installed ``tola_plugin_hook.pth`` (setup.py) runs ``install()`` at interpreter start. That only puts a finder
on ``sys.meta_path`` (standard library only: nothing heavy is imported at start). When the process first imports
``basicsr``, the finder steps aside and
  1. installs the torchvision shim (``tola_plugin_shim``), so that basicsr 1.4.2's own imports work on torchvision
     >= 0.17;
  2. lets basicsr import itself as usual;
  3. imports ``tola_plugin``: BasicSR's fixes (``tola_plugin/basicsr_glue/``) and the names of TOLA's archs,
     datasets, losses, metrics and models in BasicSR's registries, each module imported when BasicSR first builds
     one of its names (``tola_plugin/registry_index.py``): ``import basicsr`` imports no TOLA network.
So ``python basicsr/train.py``, ``python -m basicsr.train``, ``torchrun ... basicsr/train.py --launcher pytorch``
and any ``import basicsr`` see the plugin. ``TOLA_PLUGIN_HOOK=0`` (or off, false, no) turns the hook off.

basicsr's ``__init__`` imports ``basicsr.train`` and ``basicsr.test`` itself, so ``python -m basicsr.train`` would
find the module already imported when runpy is about to run it as ``__main__``, and say so (``RuntimeWarning:
'basicsr.train' found in sys.modules after import of package 'basicsr' ...``). In such a process the hook forgets
that imported copy once the plugin is registered (``forget_launcher_run_as_main``): runpy runs the launcher as
``__main__`` exactly as before, without the warning; the plugin fits the ``__main__`` namespace itself
(tola_plugin/basicsr_glue/launchers.py).
"""
import os
import sys

ENV_VAR = 'TOLA_PLUGIN_HOOK'
# the .pth file an install puts beside the packages (setup.py), and its one line
HOOK_PTH = 'tola_plugin_hook.pth'
HOOK_LINE = 'import tola_plugin_hook; tola_plugin_hook.install()\n'
LAUNCHERS = ('basicsr.train', 'basicsr.test')
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
            import tola_plugin  # noqa: F401  (BasicSR fixes, then TOLA's names into the registries)
        except Exception as err:
            raise ImportError(f'tola-plugin could not register itself into BasicSR: {err!r}; set {ENV_VAR}=0 to import '
                              f'basicsr without the plugin') from err
        forget_launcher_run_as_main()


def module_run_as_main(argv=None, orig_argv=None):
    """The module ``python -m MODULE`` is about to run while runpy imports its package (``sys.argv[0]`` is '-m'
    then, ``sys.orig_argv`` holds the command line), else None."""
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, 'orig_argv', []) if orig_argv is None else orig_argv
    if not argv or argv[0] != '-m':
        return None
    for i, arg in enumerate(orig_argv[1:], start=1):
        if arg == '-m':
            return orig_argv[i + 1] if i + 1 < len(orig_argv) else None
        if arg.startswith('-m'):
            return arg[2:]
    return None


def forget_launcher_run_as_main():
    """In ``python -m basicsr.train`` (or ``basicsr.test``), drop basicsr's imported copy of the launcher, so that
    runpy runs it as ``__main__`` without its RuntimeWarning (see the module docstring)."""
    name = module_run_as_main()
    if name in LAUNCHERS:
        sys.modules.pop(name, None)


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


def write_pth(folder: str) -> str:
    """Write the hook's .pth file into ``folder`` (a site folder: setup.py's builds, the GPU check's private one);
    -> its path."""
    path = os.path.join(folder, HOOK_PTH)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(HOOK_LINE)
    return path


def uninstall():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, BasicSRFinder)]
