#!/usr/bin/env python
"""Write options/ablations/*.yml: one option file per variant and control of the TOLA paper.

Every file is options/train/train_TOLA.yml or options/test/test_TOLA.yml with the variant's switches
changed, and a header naming the paper table/row and any choice made where the paper is ambiguous.
Trained variants get a train_<v>.yml and a test_<v>.yml (evaluating that variant's checkpoint);
fixed-checkpoint controls get a test_<v>.yml that evaluates the Full checkpoint.

    python tools/make_tola_ablations.py            # (re)write the files
    python tools/make_tola_ablations.py --check    # exit 1 if any file is missing or out of date
"""
import argparse
import os

from tola_cli.command import run_command

OPTIONS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'options')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--check', action='store_true', help='only check that the files are up to date')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from tola_lab.ablations import update_ablation_files
    return update_ablation_files(OPTIONS_DIR, args.check)


if __name__ == '__main__':
    run_command(main, parse_args)
