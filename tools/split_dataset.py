#!/usr/bin/env python
"""Alias of ``tola-split-dataset`` (tola_cli/split_dataset.py), for a clone of the repository.

From any folder: ``tola-split-dataset --help`` or ``python -m tola_cli.split_dataset --help``.
"""
from tola_cli.split_dataset import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
