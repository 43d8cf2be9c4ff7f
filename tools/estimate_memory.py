#!/usr/bin/env python
"""Alias of ``tola-estimate-memory`` (tola_cli/estimate_memory.py), for a clone of the repository.

From any folder: ``tola-estimate-memory --help`` or ``python -m tola_cli.estimate_memory --help``.
"""
from tola_cli.estimate_memory import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
