"""The dry run's stand-in for a stock CUDA PyTorch image: on ``PYTHONPATH`` of the dry run's processes, it makes the
top-level modules that $TOLA_GPU_CHECK_ABSENT names (comma-separated) unimportable, as they are on the image, so a
step that would import one there fails here first. Standard library only."""
import importlib.abc
import os
import sys


class _Absent(importlib.abc.MetaPathFinder):

    def __init__(self, names):
        self.names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split('.')[0] in self.names:
            raise ModuleNotFoundError(
                f'No module named {fullname!r} (absent from a stock CUDA PyTorch image: the GPU '
                'check\'s dry run hides it)', name=fullname)
        return None


_names = [n.strip() for n in os.environ.get('TOLA_GPU_CHECK_ABSENT', '').split(',') if n.strip()]
if _names:
    sys.meta_path.insert(0, _Absent(_names))

# then the next sitecustomize on the path, which this one shadows (the GPU check's private folder has one: it runs
# that folder's .pth files, the import hook among them)
_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _path = os.path.join(os.path.abspath(_entry or '.'), 'sitecustomize.py')
    if os.path.dirname(_path) != _here and os.path.isfile(_path):
        with open(_path, encoding='utf-8') as _f:
            exec(compile(_f.read(), _path, 'exec'), {'__file__': _path, '__name__': 'sitecustomize'})
        break
