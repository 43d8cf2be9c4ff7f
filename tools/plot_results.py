#!/usr/bin/env python
"""Alias of ``tola-plot-results`` (tola_cli/plot_results.py), for a clone of the repository.

From any folder: ``tola-plot-results --help`` or ``python -m tola_cli.plot_results --help``.
"""
from tola_cli.plot_results import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
