"""BasicSR's test pipeline with the plugin registered; ``results/`` goes under the CWD.

Usage: ``python -m tola_plugin.test -opt FILE.yml``.
Every ``torch.load`` of the run is weights-only; bad options or input end in one ``error: ...`` line and exit
status 2 (``utils/cli_errors.py``); a distributed run destroys its process group at exit.
"""
import os

from basicsr.test import test_pipeline

import tola_plugin  # noqa: F401  (registers the plugin and the BasicSR overrides)
from tola_plugin.utils import run_lock
from tola_plugin.utils.checkpoint_io import weights_only_loads
from tola_plugin.utils.cli_errors import run_tool
from tola_plugin.utils.distributed import end_process_group


def run():
    try:
        with weights_only_loads():
            test_pipeline(os.getcwd())
    finally:
        run_lock.release_all()
        end_process_group()  # torchrun / srun runs: NCCL warns (and may leak) when a group is never destroyed
    return 0


def main():
    run_tool(run)


if __name__ == '__main__':
    main()
