"""The dry run's stand-in for a stock CUDA PyTorch image: on ``PYTHONPATH`` of the dry run's processes, it lets a
top-level module come from an installed environment (a ``site-packages`` or ``dist-packages`` folder) only when
$TOLA_GPU_CHECK_IMAGE_MODULES (comma-separated: ``environment.image_module_names``) names it, as the image would
have it; the standard library, the carry's private folder ($TOLA_GPU_CHECK_SITE) and the checkout stay importable.
A step that would import a module the image lacks fails here first. Standard library only."""
import importlib.machinery
import os
import sys


class _OnlyTheImage(importlib.machinery.PathFinder):
    """The path finder, but a top-level module of an installed environment the image lacks is not found (as absent:
    ``importlib.util.find_spec`` gives None)."""

    def __init__(self, names, carry):
        self.names = frozenset(names) | frozenset(sys.stdlib_module_names)
        self.carry = os.path.realpath(carry) + os.sep if carry else None

    def find_spec(self, fullname, path=None, target=None):
        spec = super().find_spec(fullname, path, target)
        if spec is None or path is not None or fullname in self.names:
            return spec
        where = os.path.realpath(spec.origin or next(iter(spec.submodule_search_locations or []), ''))
        installed = {'site-packages', 'dist-packages'} & set(where.split(os.sep))
        return None if installed and not (self.carry and where.startswith(self.carry)) else spec


if os.environ.get('TOLA_GPU_CHECK_IMAGE_MODULES'):
    sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = _OnlyTheImage(
        os.environ['TOLA_GPU_CHECK_IMAGE_MODULES'].split(','), os.environ.get('TOLA_GPU_CHECK_SITE'))

# then the next sitecustomize on the path, which this one shadows (the GPU check's private folder has one: it runs
# that folder's .pth files, the import hook among them)
_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _path = os.path.join(os.path.abspath(_entry or '.'), 'sitecustomize.py')
    if os.path.dirname(_path) != _here and os.path.isfile(_path):
        with open(_path, encoding='utf-8') as _f:
            exec(compile(_f.read(), _path, 'exec'), {'__file__': _path, '__name__': 'sitecustomize'})
        break
