#!/usr/bin/env python
"""Alias of ``tola-diagnose`` (tola_cli/diagnose.py), for a clone of the repository.

From any folder: ``tola-diagnose --help`` or ``python -m tola_cli.diagnose --help``.
"""
from tola_cli.diagnose import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
