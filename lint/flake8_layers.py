"""flake8 plugin (setup.cfg ``[flake8:local-plugins]``): every import of the repository's code points down the layers
of docs/architecture.md ("Which folder depends on which"), imports inside functions too: a module imports its own
folder and the folders of lower layers only. The layers hold every folder and top-level module of ``tola_plugin``,
and, outside the package, the command lines (``tola_cli/``), the repository's tools (``tools/``), the import hook
(``tola_plugin_hook.py``) and the torchvision shim (``tola_plugin_shim.py``); tests/, lint/ and setup.py import
freely. Written by hand: no published flake8 plugin knows this repository's layers.

The lab (``tola_plugin/lab/``: benchmarks, the GPU check, the demo model's training, the ablations' files) sits above
the rest of the package, each of its folders and modules a unit of its own (``lab/benchmarks``); what a user imports
never imports it, and neither do the command lines: only the lab itself and ``tools/`` (and the tests) do.

LAY001 an import from a folder of the same or a higher layer (an arrow that runs up, or sideways into a circle).
LAY002 a folder or top-level module of ``tola_plugin`` that has no layer here (add it to LAYERS and to the doc).
LAY003 an import of the lab (``tola_plugin.lab``) from outside the lab and ``tools/``.
"""
import ast
import os

#: layer of each folder or top-level module, bottom (0) to top; the table docs/architecture.md draws. Inside
#: ``tola_plugin`` by name; outside it by path from the repository's root (a folder ends with '/').
LAYERS = {
    'utils': 0, 'text': 0, 'version': 0, 'registry_index': 0, 'tola_plugin_shim.py': 0,
    'data': 1, 'checkpoints': 1, 'options': 1, 'metric_weights': 1,
    'archs': 2, 'assets': 2, 'basicsr_glue': 2,
    'ocr': 3, 'metrics': 3, 'losses': 3, 'runtime': 3,
    'inference': 4, 'models': 4,
    'commands': 5, 'web': 5,
    'train': 6, 'test': 6, '__init__': 6,
    'lab/__init__': 7, 'lab/ablations': 7, 'lab/benchmarks': 7, 'lab/browser': 7, 'lab/demo': 7,
    'lab/gpu_check': 8,
    'tola_cli/': 9,
    'tools/': 10, 'tola_plugin_hook.py': 10,
}  # yapf: disable
LAB = 'lab'  # the folder of tola_plugin whose folders and modules are units of their own
#: the units outside the package: the top-level module or package a file of the unit is imported as
OUTSIDE = {
    'tola_cli': 'tola_cli/', 'tola_plugin_hook': 'tola_plugin_hook.py', 'tola_plugin_shim': 'tola_plugin_shim.py'
}
TOOLS = 'tools/'  # the repository's tools: scripts, imported by nothing
LAY001 = 'LAY001 {src} (layer {a}) imports {dst} (layer {b}): imports point down the layers (docs/architecture.md)'
LAY002 = 'LAY002 tola_plugin.{name} has no layer in lint/flake8_layers.py LAYERS (and docs/architecture.md)'
LAY003 = ('LAY003 {src} imports {dst}: the lab is imported by the lab and tools/ only, never by what a user imports '
          '(docs/architecture.md)')


def shown(unit: str) -> str:
    """How a message names ``unit``: ``tola_plugin.archs`` (``tola_plugin.lab.benchmarks``) inside the package,
    ``tola_cli/`` outside it."""
    return unit if unit.endswith(('/', '.py')) else 'tola_plugin.' + unit.replace('/', '.')


def folder_of(filename: str):
    """The unit ``filename`` belongs to: a folder or top-level module of ``tola_plugin`` (its name; in the lab, a folder
    or module of the lab: ``lab/benchmarks``), ``tola_cli/``,
    ``tools/``, ``tola_plugin_hook.py`` or ``tola_plugin_shim.py``; None elsewhere (tests, lint, setup.py)."""
    parts = os.path.normpath(os.path.abspath(filename)).replace(os.sep, '/').split('/')
    if 'tola_plugin' in parts[:-1]:
        rest = parts[len(parts) - 1 - parts[::-1].index('tola_plugin'):][1:]
        if rest[0] == LAB and len(rest) > 1:
            rest = [f'{LAB}/{rest[1]}'] + rest[2:]
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
            if node.module == 'tola_plugin':  # from tola_plugin import folder (a module of its own), or a face's name
                names = [f'tola_plugin.{a.name if a.name in LAYERS else "__init__"}' for a in node.names]
            elif node.module == f'tola_plugin.{LAB}':  # from tola_plugin.lab import benchmarks
                names = [
                    f'tola_plugin.{LAB}.{a.name if f"{LAB}/{a.name}" in LAYERS else "__init__"}' for a in node.names
                ]
            else:
                names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split('.')
            if parts[0] == 'tola_plugin' and len(parts) > 1 and parts[1] == LAB:
                yield node.lineno, node.col_offset, f'{LAB}/{parts[2] if len(parts) > 2 else "__init__"}'
            elif parts[0] == 'tola_plugin':
                yield node.lineno, node.col_offset, parts[1] if len(parts) > 1 else '__init__'
            elif parts[0] in OUTSIDE:
                yield node.lineno, node.col_offset, OUTSIDE[parts[0]]


class Layers:
    name = 'tola-layers'
    version = '3'

    def __init__(self, tree: ast.AST, filename: str):
        self.tree = tree
        self.filename = filename

    def run(self):
        src = folder_of(self.filename)
        if src is None:
            return
        if src not in LAYERS:
            yield 1, 0, LAY002.format(name=shown(src)[len('tola_plugin.'):]), type(self)
            return
        for line, col, dst in imported_folders(self.tree):
            if dst == src:
                continue
            if dst not in LAYERS:
                yield line, col, LAY002.format(name=shown(dst)[len('tola_plugin.'):]), type(self)
            elif dst.startswith(f'{LAB}/') and not (src.startswith(f'{LAB}/') or src == TOOLS):
                yield line, col, LAY003.format(src=shown(src), dst=shown(dst)), type(self)
            elif LAYERS[dst] >= LAYERS[src]:
                yield line, col, LAY001.format(src=shown(src), a=LAYERS[src], dst=shown(dst), b=LAYERS[dst]), type(self)
