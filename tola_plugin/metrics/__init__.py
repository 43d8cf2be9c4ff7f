"""Import every ``*_metric.py`` module of this folder so that its classes register themselves."""
import importlib
from os import path as osp

from basicsr.utils import scandir

_folder = osp.dirname(osp.abspath(__file__))
_module_names = sorted(osp.splitext(osp.basename(p))[0] for p in scandir(_folder) if p.endswith('_metric.py'))
_modules = [importlib.import_module(f'tola_plugin.metrics.{n}') for n in _module_names]
