#!/usr/bin/env python
"""Interpreter start-up with and without the plugin installed: ``python -c pass`` in fresh virtualenvs that share this
environment's dependencies, without the plugin, with a regular install (``pip install .``) and with an editable one
(``pip install -e .``), run interleaved; then ``import basicsr`` in the regular install with the plugin, without it, and
with every class of the plugin imported (the figures: docs/architecture.md, "A light plugin").

The plugin's .pth file runs at every interpreter start (tola_plugin_hook.py: a finder waiting for basicsr, nothing
imported); setuptools' editable install adds its own path finder, measured alone in a fourth venv whose hook .pth is
removed. Byte-code is written and used, as in an installed
environment (``PYTHONDONTWRITEBYTECODE`` is cleared for the timed runs).

Example:
    python tools/benchmark_startup.py --runs 300 --import-runs 10 --out results/benchmark/startup.json
"""
import argparse
import os

from tola_cli.command import run_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--runs', type=int, default=200, help='timed starts per venv [200]')
    p.add_argument('--import-runs', type=int, default=10, help='timed `import basicsr` per case, 0: none [10]')
    p.add_argument('--out', help='JSON with every timing')
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.benchmarks.startup_benchmark import benchmark_startup
    return benchmark_startup(REPO, args.runs, args.out, args.import_runs)


if __name__ == '__main__':
    run_command(main, parse_args)
