#!/usr/bin/env python
"""Alias of ``tola-evaluate`` (tola_cli/evaluate.py), for a clone of the repository.

From any folder: ``tola-evaluate --help`` or ``python -m tola_cli.evaluate --help``.
"""
from tola_cli.evaluate import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
