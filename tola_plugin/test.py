"""BasicSR's test pipeline with the plugin registered; ``results/`` goes under the CWD.

Usage: ``python -m tola_plugin.test -opt FILE.yml``.
Every ``torch.load`` of the run is weights-only; bad options or input end in one ``error: ...`` line and exit
status 2 (``utils/cli_errors.py``; ``--debug`` shows the traceback); a distributed run destroys its process group
at exit.
"""
from basicsr.test import test_pipeline

from tola_plugin.basicsr_glue.launchers import run_pipeline  # (the package __init__ has registered the plugin)
from tola_plugin.utils.cli_errors import debug_requested, run_tool


def run():
    return run_pipeline(test_pipeline)


def main():
    run_tool(run, debug=debug_requested())  # --debug is BasicSR's flag: its parser reads it too


if __name__ == '__main__':
    main()
