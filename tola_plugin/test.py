"""BasicSR's test pipeline with the plugin registered; ``results/`` goes under the CWD.

Usage: ``python -m tola_plugin.test -opt FILE.yml``.
"""
import os

import tola_plugin  # noqa: F401  (registers the plugin and the CPU/DDP overrides)
from basicsr.test import test_pipeline


def main():
    test_pipeline(os.getcwd())


if __name__ == '__main__':
    main()
