"""flake8 plugin (setup.cfg ``[flake8:local-plugins]``): every import inside ``tola_plugin`` points down the layers of
docs/architecture.md ("Which folder depends on which"), imports inside functions too: a module imports its own folder
and the folders of lower layers only. Written by hand: no published flake8 plugin knows this package's layers.

LAY001 an import from a folder of the same or a higher layer (an arrow that runs up, or sideways into a circle).
LAY002 a folder or top-level module of ``tola_plugin`` that has no layer here (add it to LAYERS and to the doc).
"""
import ast
import os

#: layer of each folder or top-level module of tola_plugin, bottom (0) to top; the table docs/architecture.md draws
LAYERS = {
    'utils': 0, 'text': 0, 'vocab': 0, 'version': 0, 'registry_index': 0,
    'data': 1, 'checkpoints': 1,
    'archs': 2, 'samples': 2, 'rendered_samples': 2, 'basicsr_glue': 2,
    'ocr': 3, 'metrics': 3, 'losses': 3, 'runtime': 3,
    'inference': 4, 'models': 4,
    'evaluation': 5,
    'demo': 6,
    'train': 7, 'test': 7, '__init__': 7, 'gpu_check': 7,
}  # yapf: disable
LAY001 = 'LAY001 tola_plugin.{src} (layer {a}) imports tola_plugin.{dst} (layer {b}): imports point down the layers ' \
         '(docs/architecture.md)'
LAY002 = 'LAY002 tola_plugin.{name} has no layer in lint/flake8_layers.py LAYERS (and docs/architecture.md)'


def folder_of(filename: str):
    """The folder (or top-level module) of ``tola_plugin`` that ``filename`` belongs to; None outside the package."""
    parts = os.path.normpath(os.path.abspath(filename)).replace(os.sep, '/').split('/')
    if 'tola_plugin' not in parts[:-1]:
        return None
    rest = parts[len(parts) - 1 - parts[::-1].index('tola_plugin'):][1:]
    return rest[0][:-3] if len(rest) == 1 else rest[0]


def imported_folders(tree: ast.AST):
    """(line, column, folder of tola_plugin) of every import of the package in ``tree``, at any depth."""
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module != 'tola_plugin':
                names = [node.module]
            else:  # from tola_plugin import folder (a module of its own), or a name of the package's face
                names = [f'tola_plugin.{a.name if a.name in LAYERS else "__init__"}' for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split('.')
            if parts[0] == 'tola_plugin':
                yield node.lineno, node.col_offset, parts[1] if len(parts) > 1 else '__init__'


class Layers:
    name = 'tola-layers'
    version = '1'

    def __init__(self, tree: ast.AST, filename: str):
        self.tree = tree
        self.filename = filename

    def run(self):
        src = folder_of(self.filename)
        if src is None:
            return
        if src not in LAYERS:
            yield 1, 0, LAY002.format(name=src), type(self)
            return
        for line, col, dst in imported_folders(self.tree):
            if dst == src:
                continue
            if dst not in LAYERS:
                yield line, col, LAY002.format(name=dst), type(self)
            elif LAYERS[dst] >= LAYERS[src]:
                yield line, col, LAY001.format(src=src, a=LAYERS[src], dst=dst, b=LAYERS[dst]), type(self)
