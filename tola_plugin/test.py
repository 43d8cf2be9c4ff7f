"""BasicSR's test pipeline with the plugin registered; ``results/`` goes under the CWD.

``python -m tola_plugin.test`` and the console script ``tola-test`` (``tola_cli/test.py``) answer --help before
basicsr is imported, and check the option file, its ``--force_yml`` entries and the paths it reads before torch and
BasicSR are imported (``options/start_checks.py``; ``python -m`` through the import hook, ``tola_plugin_hook.py``).
Usage: ``python -m tola_plugin.test -opt FILE.yml``.
Every ``torch.load`` of the run is weights-only; bad options or input end in one ``error: ...`` line and exit
status 2 (``utils/cli_errors.py``; ``--debug`` shows the traceback); a distributed run destroys its process group
at exit.
"""
from tola_plugin.utils.cli_errors import debug_requested, run_tool


def run(pipeline=None):
    """Run ``pipeline`` (default: BasicSR's ``test_pipeline``, imported here: importing basicsr registers the plugin,
    ``tola_plugin.register``) as our launcher runs it (``basicsr_glue.launchers.run_pipeline``)."""
    if pipeline is None:
        from basicsr.test import test_pipeline as pipeline

    from tola_plugin.basicsr_glue.launchers import run_pipeline
    return run_pipeline(pipeline)


def main():
    run_tool(run, debug=debug_requested())  # --debug is BasicSR's flag: its parser reads it too


if __name__ == '__main__':
    main()
