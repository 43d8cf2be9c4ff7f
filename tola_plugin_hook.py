"""Registers tola-plugin into BasicSR in every process of the environment it is installed in.

The installed ``tola_plugin_hook.pth`` (setup.py) runs ``install()`` at interpreter start. That only puts a finder
on ``sys.meta_path`` (``tola_plugin_shim.after_basicsr_import``; standard library only: nothing heavy is imported at
start). When the process first imports ``basicsr``, the finder steps aside and
  1. installs the torchvision shim (``tola_plugin_shim``), so that basicsr 1.4.2's own imports work on torchvision
     >= 0.17;
  2. lets basicsr import itself as usual;
  3. registers ``tola_plugin`` (``register_plugin``: ``tola_plugin.register()``): BasicSR's fixes
     (``tola_plugin/basicsr_glue/``) and the names of TOLA's archs, datasets, losses, metrics and models in BasicSR's
     registries, each module imported when BasicSR first builds one of its names (``tola_plugin/registry_index.py``):
     ``import basicsr`` imports no TOLA network.
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

import tola_plugin_shim  # standard library only until basicsr is imported

ENV_VAR = 'TOLA_PLUGIN_HOOK'
# the .pth file an install puts beside the packages (setup.py), and its one line
HOOK_PTH = 'tola_plugin_hook.pth'
HOOK_LINE = 'import tola_plugin_hook; tola_plugin_hook.install()\n'
LAUNCHERS = ('basicsr.train', 'basicsr.test')
# launchers whose command line is checked before their package is imported (``LauncherCheck``)
CHECKED_LAUNCHERS = LAUNCHERS + ('tola_plugin.train', 'tola_plugin.test')
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


def register_plugin():
    """What the hook does right after basicsr's first import: register the plugin (``tola_plugin.register``: BasicSR's
    fixes, then TOLA's names into the registries), then forget a launcher run as ``__main__``."""
    try:
        import tola_plugin
        tola_plugin.register()
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


class LauncherCheck:
    """``sys.meta_path`` finder of a process started as ``python -m LAUNCHER`` (``CHECKED_LAUNCHERS``): before runpy
    imports what would import torch (``basicsr``, or ``tola_plugin.train`` once its light package is imported), it
    runs ``tola_cli.command.check_launcher_start``: --help, usage errors, a wrong option file or data path answer at
    once, not after tens of seconds of imports. Finds nothing itself."""

    def __init__(self, launcher: str):
        self.launcher = launcher
        self.first = 'basicsr' if launcher.startswith('basicsr.') else launcher
        self.done = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.first or self.done:
            return None
        # one shot; it stays in sys.meta_path: removing it while the import system walks that list would skip the
        # finder after it (the shim's, which basicsr needs)
        self.done = True
        from tola_cli.command import check_launcher_start
        check_launcher_start(self.launcher)
        return None


def installed() -> bool:
    """Whether the hook waits for basicsr's first import in this process."""
    finder = tola_plugin_shim.waiting_finder()
    return finder is not None and register_plugin in finder.after


def install():
    """Called by tola_plugin_hook.pth at interpreter start: wait for basicsr's first import (unless basicsr is
    already imported or the hook is turned off), and, in ``python -m`` of a launcher, check its command line first
    (``LauncherCheck``). Imports nothing but the standard library and the shim's module."""
    if 'basicsr' in sys.modules or installed() or not hook_enabled():
        return
    tola_plugin_shim.after_basicsr_import(register_plugin)
    launcher = module_run_as_main()
    if launcher in CHECKED_LAUNCHERS:
        sys.meta_path.insert(0, LauncherCheck(launcher))


def write_pth(folder: str) -> str:
    """Write the hook's .pth file into ``folder`` (a site folder: setup.py's builds, the GPU check's private one);
    -> its path."""
    path = os.path.join(folder, HOOK_PTH)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(HOOK_LINE)
    return path
