"""tola-train: BasicSR's training launcher with the plugin registered (``python -m tola_plugin.train`` and ``python -m
basicsr.train`` are the same command); this command line answers --help and usage errors before BasicSR is imported.

Example:
    tola-train -opt options/demo/train_TOLA_demo.yml --force_yml short_run=4
"""
import sys

from tola_cli.arguments import launcher_parser


def build_parser():
    return launcher_parser('tola-train', training=True)


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    """Check the arguments, then run BasicSR's training pipeline (which reads them from sys.argv)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_args(argv)
    sys.argv[1:] = argv
    from tola_plugin.train import run
    return run()


def cli(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_args(argv)
    from tola_plugin.utils.cli_errors import run_tool
    run_tool(lambda: main(argv), debug='--debug' in argv)  # --debug is BasicSR's flag too: it stays in argv


if __name__ == '__main__':
    cli()
