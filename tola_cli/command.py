"""How every command of tola_cli runs as a console script (``tola-make-lmdb``, ...) or ``python -m tola_cli.<name>``:
the arguments are parsed first, with the standard library only, so ``--help`` and usage errors answer at once and
import nothing of the package; then the command runs under the tool convention (``run_tool``: bad input -> one
``error: ...`` line, exit status 2; docs/reliability.md, "Errors")."""
import sys


def run_command(main, parse_args, argv=None) -> None:
    """``parse_args(argv)`` (exits on --help or a usage error), then ``run_tool(lambda: main(argv))``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_args(argv)
    from tola_plugin.utils.cli_errors import run_tool  # the package, once the arguments are known to be good
    run_tool(lambda: main(argv))
