#!/usr/bin/env python
"""The GPU check (docs/training_gpus.md, "The GPU check"): the tests marked cuda, training under torchrun with exact
resume, peak memory and speed at batch 16, inference in each precision; one report (markdown + JSON) in REPORT_DIR.
Run by the bundle's gpu_check.sh (``make gpu-bundle``), which installs the bundle's wheels first:

    bash gpu_check.sh REPORT_DIR              # on a GPU machine
    bash gpu_check.sh REPORT_DIR --dry-run    # on a CPU: the same steps, demo backbone, a few iterations
"""
import argparse
import os
import sys

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('report_dir', help='folder of the report (gpu_check.md, gpu_check.json)')
    parser.add_argument('--dry-run', action='store_true',
                        help='on the CPU (CUDA replaced by the CPU): demo backbone, a few iterations')
    parser.add_argument('--bundle', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help='the bundle folder (default: the one this tool is in)')
    parser.add_argument('--work', help='folder of the runs\' files (default: a new temporary folder)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.gpu_check.run import run_gpu_check
    command = 'gpu_check.sh ' + ' '.join(sys.argv[1:] if argv is None else argv)
    return run_gpu_check(args.report_dir, args.bundle, args.dry_run, args.work, command)


if __name__ == '__main__':
    run_command(main, parse_args)
