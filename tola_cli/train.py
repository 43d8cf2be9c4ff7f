"""tola-train: BasicSR's training launcher with the plugin registered (``python -m tola_plugin.train`` and ``python -m
basicsr.train`` are the same command); this command line answers --help and usage errors before BasicSR is imported.

Example:
    tola-train -opt options/demo/train_TOLA_demo.yml --force_yml short_run=4
"""
from tola_cli.arguments import launcher_parser
from tola_cli.command import run_command, run_launcher


def build_parser():
    return launcher_parser('tola-train', training=True)


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    """Check the arguments, then run BasicSR's training pipeline (which reads them from sys.argv)."""
    return run_launcher('train', parse_args, argv)


def cli(argv=None):
    run_command(main, parse_args, argv, parses_debug=True)  # --debug is BasicSR's flag too: it stays in argv


if __name__ == '__main__':
    cli()
