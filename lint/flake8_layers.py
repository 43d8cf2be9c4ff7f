"""flake8 plugin (setup.cfg ``[flake8:local-plugins]``): every import of the repository's code points down the layers
of docs/architecture.md ("Which folder depends on which"), imports inside functions too: a module imports its own
folder and the folders of lower layers only. The layers hold every folder and top-level module of ``tola_plugin``,
and, outside the package, the command lines (``tola_cli/``), the repository's tools (``tools/``), the import hook
(``tola_plugin_hook.py``) and the torchvision shim (``tola_plugin_shim.py``); tests/, lint/ and setup.py import
freely. Written by hand: no published flake8 plugin knows this repository's layers.

LAY001 an import from a folder of the same or a higher layer (an arrow that runs up, or sideways into a circle).
LAY002 a folder or top-level module of ``tola_plugin`` that has no layer here (add it to LAYERS and to the doc).
"""
import ast
import os

#: layer of each folder or top-level module, bottom (0) to top; the table docs/architecture.md draws. Inside
#: ``tola_plugin`` by name; outside it by path from the repository's root (a folder ends with '/').
LAYERS = {
    'utils': 0, 'text': 0, 'vocab': 0, 'version': 0, 'registry_index': 0, 'tola_plugin_shim.py': 0,
    'data': 1, 'checkpoints': 1, 'ablations': 1, 'pretrained': 1,
    'archs': 2, 'samples': 2, 'rendered_samples': 2, 'basicsr_glue': 2, 'data_preparation': 2,
    'ocr': 3, 'metrics': 3, 'losses': 3, 'runtime': 3,
    'inference': 4, 'models': 4,
    'evaluation': 5, 'benchmarks': 5,
    'demo': 6,
    'train': 7, 'test': 7, '__init__': 7, 'gpu_check': 7,
    'tola_cli/': 8, 'tola_plugin_hook.py': 8,
    'tools/': 9,
}  # yapf: disable
#: the units outside the package: the top-level module or package a file of the unit is imported as
OUTSIDE = {
    'tola_cli': 'tola_cli/', 'tola_plugin_hook': 'tola_plugin_hook.py', 'tola_plugin_shim': 'tola_plugin_shim.py'
}
TOOLS = 'tools/'  # the repository's tools: scripts, imported by nothing
LAY001 = 'LAY001 {src} (layer {a}) imports {dst} (layer {b}): imports point down the layers (docs/architecture.md)'
LAY002 = 'LAY002 tola_plugin.{name} has no layer in lint/flake8_layers.py LAYERS (and docs/architecture.md)'


def shown(unit: str) -> str:
    """How a message names ``unit``: ``tola_plugin.archs`` inside the package, ``tola_cli/`` outside it."""
    return unit if unit.endswith(('/', '.py')) else f'tola_plugin.{unit}'


def folder_of(filename: str):
    """The unit ``filename`` belongs to: a folder or top-level module of ``tola_plugin`` (its name), ``tola_cli/``,
    ``tools/``, ``tola_plugin_hook.py`` or ``tola_plugin_shim.py``; None elsewhere (tests, lint, setup.py)."""
    parts = os.path.normpath(os.path.abspath(filename)).replace(os.sep, '/').split('/')
    if 'tola_plugin' in parts[:-1]:
        rest = parts[len(parts) - 1 - parts[::-1].index('tola_plugin'):][1:]
        return rest[0][:-3] if len(rest) == 1 else rest[0]
    if parts[-2] == 'tools':
        return TOOLS
    if parts[-2] in OUTSIDE:
        return OUTSIDE[parts[-2]]
    if parts[-1].endswith('.py') and parts[-1][:-3] in OUTSIDE:
        return OUTSIDE[parts[-1][:-3]]
    return None


def imported_folders(tree: ast.AST):
    """(line, column, unit) of every import of the package, of tola_cli, the hook or the shim in ``tree``, at any
    depth."""
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
            elif parts[0] in OUTSIDE:
                yield node.lineno, node.col_offset, OUTSIDE[parts[0]]


class Layers:
    name = 'tola-layers'
    version = '2'

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
                yield line, col, LAY001.format(src=shown(src), a=LAYERS[src], dst=shown(dst), b=LAYERS[dst]), type(self)
