"""tola-test: BasicSR's test launcher with the plugin registered (``python -m tola_plugin.test`` and ``python -m
basicsr.test`` are the same command); this command line answers --help and usage errors before BasicSR is imported.

Example:
    tola-test -opt options/demo/test_TOLA_demo.yml
"""
import sys

from tola_cli.arguments import launcher_parser


def build_parser():
    return launcher_parser('tola-test', training=False)


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    """Check the arguments, then run BasicSR's test pipeline (which reads them from sys.argv)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_args(argv)
    sys.argv[1:] = argv
    from tola_plugin.test import run
    return run()


def cli(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_args(argv)
    from tola_plugin.utils.cli_errors import run_tool
    run_tool(lambda: main(argv), debug='--debug' in argv)  # --debug is BasicSR's flag too: it stays in argv


if __name__ == '__main__':
    cli()
