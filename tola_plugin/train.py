"""BasicSR's training pipeline with the plugin registered; ``experiments/`` goes under the CWD.

Usage: ``python -m tola_plugin.train -opt FILE.yml [--auto_resume] [--launcher pytorch]``.
"""
import os

import tola_plugin  # noqa: F401  (registers the plugin and the CPU/DDP overrides)
from basicsr.train import train_pipeline


def main():
    train_pipeline(os.getcwd())


if __name__ == '__main__':
    main()
