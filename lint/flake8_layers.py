"""flake8 plugin (setup.cfg ``[flake8:local-plugins]``): every import of the repository's code points down the layers
of docs/architecture.md ("Which folder depends on which"), imports inside functions too: a module imports its own
folder and the folders of lower layers only. The layers hold every folder and top-level module of ``tola_plugin``,
and, outside the package, the lab (``tola_lab/``), the command lines (``tola_cli/``), the repository's tools
(``tools/``), the import hook (``tola_plugin_hook.py``) and the torchvision shim (``tola_plugin_shim.py``); tests/,
lint/ and setup.py import freely. Written by hand: no published flake8 plugin knows this repository's layers.

The lab (``tola_lab/``, a top-level package of the same wheel: benchmarks, the GPU check, the demo model's training,
the browser driver, the ablations' files) sits above the package, each of its folders and modules a unit of its own
(``tola_lab/benchmarks``); what a user imports (``tola_plugin``) never imports it, and neither do the command lines
(``tola_cli``): only the lab itself and ``tools/`` (and the tests) do.

LAY001 an import from a folder of the same or a higher layer (an arrow that runs up, or sideways into a circle).
LAY002 a folder or top-level module of ``tola_plugin`` or ``tola_lab`` that has no layer here (add it to LAYERS and to
       the doc).
LAY003 an import of the lab (``tola_lab``) from outside the lab and ``tools/``.
"""
import ast
import os

#: layer of each folder or top-level module, bottom (0) to top; the table docs/architecture.md draws. Inside
#: ``tola_plugin`` by name; outside it by path from the repository's root (a folder ends with '/'; the lab's units:
#: ``tola_lab/<folder or module>``).
LAYERS = {
    'utils': 0, 'text': 0, 'version': 0, 'registry_index': 0, 'tola_plugin_shim.py': 0,
    'data': 1, 'checkpoints': 1, 'options': 1, 'metric_weights': 1,
    'archs': 2, 'assets': 2, 'basicsr_glue': 2,
    'ocr': 3, 'metrics': 3, 'losses': 3, 'runtime': 3,
    'inference': 4, 'models': 4,
    'commands': 5, 'web': 5,
    'train': 6, 'test': 6, '__init__': 6,
    'tola_lab/__init__': 7, 'tola_lab/ablations': 7, 'tola_lab/benchmarks': 7, 'tola_lab/browser': 7,
    'tola_lab/demo': 7,
    'tola_lab/gpu_check': 8,
    'tola_cli/': 9,
    'tools/': 10, 'tola_plugin_hook.py': 10,
}  # yapf: disable
LAB = 'tola_lab'  # the lab: a top-level package beside tola_plugin, whose folders and modules are units of their own
PACKAGE = 'tola_plugin'
#: the units outside the package: the top-level module or package a file of the unit is imported as
OUTSIDE = {
    'tola_cli': 'tola_cli/', 'tola_plugin_hook': 'tola_plugin_hook.py', 'tola_plugin_shim': 'tola_plugin_shim.py'
}
TOOLS = 'tools/'  # the repository's tools: scripts, imported by nothing
LAY001 = 'LAY001 {src} (layer {a}) imports {dst} (layer {b}): imports point down the layers (docs/architecture.md)'
LAY002 = 'LAY002 {name} has no layer in lint/flake8_layers.py LAYERS (and docs/architecture.md)'
LAY003 = ('LAY003 {src} imports {dst}: the lab is imported by the lab and tools/ only, never by what a user imports '
          '(docs/architecture.md)')


def shown(unit: str) -> str:
    """How a message names ``unit``: ``tola_plugin.archs`` inside the package, ``tola_lab.benchmarks`` in the lab,
    ``tola_cli/`` outside them."""
    if unit.startswith(f'{LAB}/'):
        return unit.replace('/', '.')
    return unit if unit.endswith(('/', '.py')) else f'{PACKAGE}.' + unit.replace('/', '.')


def folder_of(filename: str):
    """The unit ``filename`` belongs to: a folder or top-level module of ``tola_plugin`` (its name), of the lab
    (``tola_lab/benchmarks``, ``tola_lab/ablations``), ``tola_cli/``, ``tools/``, ``tola_plugin_hook.py`` or
    ``tola_plugin_shim.py``; None elsewhere (tests, lint, setup.py)."""
    parts = os.path.normpath(os.path.abspath(filename)).replace(os.sep, '/').split('/')
    top = max((i for i, part in enumerate(parts[:-1]) if part in (PACKAGE, LAB)), default=None)  # the innermost
    if top is not None:
        rest = parts[top + 1:]
        unit = rest[0][:-3] if len(rest) == 1 else rest[0]
        return f'{LAB}/{unit}' if parts[top] == LAB else unit
    if parts[-2] == 'tools':
        return TOOLS
    if parts[-2] in OUTSIDE:
        return OUTSIDE[parts[-2]]
    if parts[-1].endswith('.py') and parts[-1][:-3] in OUTSIDE:
        return OUTSIDE[parts[-1][:-3]]
    return None


def imported_folders(tree: ast.AST):
    """(line, column, unit) of every import of the package, of the lab, of tola_cli, the hook or the shim in
    ``tree``, at any depth."""
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == PACKAGE:  # from tola_plugin import folder (a module of its own), or a face's name
                names = [f'{PACKAGE}.{a.name if a.name in LAYERS else "__init__"}' for a in node.names]
            elif node.module == LAB:  # from tola_lab import benchmarks
                names = [f'{LAB}.{a.name if f"{LAB}/{a.name}" in LAYERS else "__init__"}' for a in node.names]
            else:
                names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split('.')
            if parts[0] == LAB:
                yield node.lineno, node.col_offset, f'{LAB}/{parts[1] if len(parts) > 1 else "__init__"}'
            elif parts[0] == PACKAGE:
                yield node.lineno, node.col_offset, parts[1] if len(parts) > 1 else '__init__'
            elif parts[0] in OUTSIDE:
                yield node.lineno, node.col_offset, OUTSIDE[parts[0]]


class Layers:
    name = 'tola-layers'
    version = '4'

    def __init__(self, tree: ast.AST, filename: str):
        self.tree = tree
        self.filename = filename

    def run(self):
        src = folder_of(self.filename)
        if src is None:
            return
        if src not in LAYERS:
            yield 1, 0, LAY002.format(name=shown(src)), type(self)
            return
        for line, col, dst in imported_folders(self.tree):
            if dst == src:
                continue
            if dst not in LAYERS:
                yield line, col, LAY002.format(name=shown(dst)), type(self)
            elif dst.startswith(f'{LAB}/') and not (src.startswith(f'{LAB}/') or src == TOOLS):
                yield line, col, LAY003.format(src=shown(src), dst=shown(dst)), type(self)
            elif LAYERS[dst] >= LAYERS[src]:
                yield line, col, LAY001.format(src=shown(src), a=LAYERS[src], dst=shown(dst), b=LAYERS[dst]), type(self)
