#!/usr/bin/env python
"""Alias of ``tola-export-merged`` (tola_cli/export_merged.py), for a clone of the repository.

From any folder: ``tola-export-merged --help`` or ``python -m tola_cli.export_merged --help``.
"""
from tola_cli.export_merged import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
