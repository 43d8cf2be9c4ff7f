#!/usr/bin/env python
"""Alias of ``tola-convert-difftsr`` (tola_cli/convert_difftsr.py), for a clone of the repository.

From any folder: ``tola-convert-difftsr --help`` or ``python -m tola_cli.convert_difftsr --help``.
"""
from tola_cli.convert_difftsr import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
