"""How every command of tola_cli runs as a console script (``tola-make-lmdb``, ...) or ``python -m tola_cli.<name>``:
the arguments are parsed first, with the standard library only, so ``--help`` and usage errors answer at once and
import nothing of the package; then the command runs under the tool convention (``run_tool``: bad input -> one
``error: ...`` line, exit status 2; docs/reliability.md, "Errors")."""
import sys


def run_command(main, parse_args, argv=None, parses_debug: bool = False) -> None:
    """``parse_args(argv)`` (exits on --help or a usage error), then ``run_tool(lambda: main(argv))``.
    ``parses_debug``: the command's own parser takes ``--debug`` (BasicSR's launchers), so it stays in ``argv``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_args(argv)
    from tola_plugin.utils.cli_errors import run_tool  # the package, once the arguments are known to be good
    run_tool(lambda: main(argv), debug='--debug' in argv if parses_debug else None)


def run_launcher(launcher: str, parse_args, argv=None) -> int:
    """BasicSR's launcher with the plugin, ``tola_plugin.<launcher>`` ('train' or 'test'), on ``argv`` once
    ``parse_args`` has checked them (BasicSR's pipelines read their arguments from sys.argv)."""
    import importlib
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_args(argv)
    from tola_plugin.options.start_checks import check_start
    check_start(argv)  # the option file and its paths, said before the imports of torch and BasicSR
    sys.argv[1:] = argv
    return importlib.import_module(f'tola_plugin.{launcher}').run()


def check_launcher_start(module: str, argv=None) -> None:
    """``python -m MODULE`` for BasicSR's launchers and ours (``basicsr.train``, ``tola_plugin.test``, ...), called by
    the import hook (``tola_plugin_hook.py``) before torch and BasicSR are imported: the command line of tola-train
    (tola-test) answers --help and usage errors, named as run, then the option file and the paths it reads are checked
    (``options.start_checks``), an error one line and exit status 2 (with ``--debug`` its traceback)."""
    from tola_cli.arguments import launcher_parser
    argv = sys.argv[1:] if argv is None else list(argv)
    launcher_parser(f'python -m {module}', training=module.endswith('.train')).parse_args(argv)
    from tola_plugin.options.start_checks import check_start
    from tola_plugin.utils.cli_errors import run_checked
    run_checked(lambda: check_start(argv), debug='--debug' in argv)
