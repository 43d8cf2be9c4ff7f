#!/usr/bin/env python
"""Alias of ``tola-make-lmdb`` (tola_cli/make_lmdb.py), for a clone of the repository.

From any folder: ``tola-make-lmdb --help`` or ``python -m tola_cli.make_lmdb --help``.
"""
from tola_cli.make_lmdb import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
