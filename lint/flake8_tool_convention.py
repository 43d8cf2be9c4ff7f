"""flake8 plugin (setup.cfg ``[flake8:local-plugins]``): every command line follows the tool convention of
docs/reliability.md, "Errors": argparse + ``main(argv)`` + ``run_tool`` (bad input -> one ``error:`` line and exit
status 2), never a hand-written exit (TOL001-TOL003). Written by hand: no published flake8 plugin knows our
``run_tool``.

Commands: ``tools/*.py``, the modules of ``tola_cli/`` (but its helpers ``arguments``, ``command`` and
``defaults``), ``tola_plugin/train.py``, ``tola_plugin/test.py``. A tool that only re-exports another command's
``main`` (``from tola_cli.infer import cli, main``) is that command. ``run_tool`` or tola_cli's ``run_command``
(which parses first, then calls ``run_tool``) runs a command.

A tool (``tools/*.py``, ``tola_cli/*.py``) is also argument parsing plus one call into the package (TOL004): its only
top-level functions are ``main``, ``parse_args``, ``build_parser``, the console-script entry ``cli`` and argparse type
functions named ``parse_*``, and it defines no class; helpers, loops over data and file writing live in a package
module, where tests import them. ``tola_cli/web.py`` (the web server; its ``run`` is shared with
tools/web_screenshot.py) is checked as a command only.
"""
import ast
import os

COMMANDS = ('tola_cli/web.py', 'tola_plugin/train.py', 'tola_plugin/test.py')
CLI_HELPERS = ('__init__.py', 'arguments.py', 'command.py', 'defaults.py')
RUNNERS = ('run_tool', 'run_command')
TOL001 = 'TOL001 command line without run_tool(...) or run_command(...) (docs/reliability.md, "Errors")'
TOL002 = 'TOL002 command line without a main() function'
TOL003 = 'TOL003 command line exits by hand ({}); raise, and let run_tool set the exit status'
TOL004 = ('TOL004 tool defines {} at top level; a tool is argument parsing plus one call into the package (only '
          'main, parse_args, build_parser, cli and parse_* argparse types): move it into a package module')
TOOL_FUNCTIONS = ('main', 'parse_args', 'build_parser', 'cli')


def _path(filename: str) -> str:
    return os.path.normpath(os.path.abspath(filename)).replace(os.sep, '/')


def is_tool(filename: str) -> bool:
    path = _path(filename)
    folder, name = os.path.basename(os.path.dirname(path)), os.path.basename(path)
    if not name.endswith('.py'):
        return False
    return folder == 'tools' or (folder == 'tola_cli' and name not in CLI_HELPERS and name != 'web.py')


def is_command(filename: str) -> bool:
    return is_tool(filename) or any(_path(filename).endswith('/' + c) for c in COMMANDS)


def tool_definition_allowed(node: ast.AST) -> bool:
    """A top-level definition a tool may have: its ``main``, its argument parsing, argparse type functions."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name in TOOL_FUNCTIONS or node.name.startswith('parse_')
    return not isinstance(node, ast.ClassDef)


class ToolConvention:
    name = 'tola-tool-convention'
    version = '1'

    def __init__(self, tree: ast.AST, filename: str):
        self.tree = tree
        self.filename = filename

    def run(self):
        if not is_command(self.filename):
            return
        functions = {n.name for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef)}
        imported = {a.asname or a.name for n in ast.walk(self.tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        if 'main' not in functions and 'main' in imported:
            return  # an alias of another command, which is checked where it is written
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call)]
        if not set(RUNNERS) & {c.func.id for c in calls if isinstance(c.func, ast.Name)}:
            yield 1, 0, TOL001, type(self)
        if 'main' not in functions:
            yield 1, 0, TOL002, type(self)
        for c in calls:
            f = c.func
            name = (
                f.id if isinstance(f, ast.Name) else
                f'{f.value.id}.{f.attr}' if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else '')
            if name in ('sys.exit', 'exit', 'quit', 'os._exit'):
                yield c.lineno, c.col_offset, TOL003.format(f'{name}(...)'), type(self)
        if is_tool(self.filename):
            for node in self.tree.body:
                if not tool_definition_allowed(node):
                    kind = 'class' if isinstance(node, ast.ClassDef) else 'function'
                    yield node.lineno, node.col_offset, TOL004.format(f'{kind} {node.name!r}'), type(self)
