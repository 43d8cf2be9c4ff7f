#!/usr/bin/env python
"""The GPU check (docs/training_gpus.md, "The GPU check"): a smoke test, peak memory and speed of training at batch
16, each precision judged where TOLA amplifies its error, inference in each precision, the tests marked cuda, training
under torchrun with exact resume; one report (markdown + JSON) in REPORT_DIR, rewritten after each step, all within
--deadline seconds. Run by gpu_check.sh, which installs the carried wheels first:

    bash tools/gpu_check.sh REPORT_DIR                 # from a checkout, with build/gpu_carry (make gpu-carry)
    bash gpu_check.sh REPORT_DIR                       # from the bundle's folder (make gpu-bundle)
    bash tools/gpu_check.sh REPORT_DIR --dry-run       # on a CPU: the same steps, tiny network, a few iterations
    bash tools/gpu_check.sh REPORT_DIR --steps smoke,demo_model   # train the demo model (docs/demo_backbone.md)
"""
import argparse
import os
import sys

from tola_cli.command import run_command

# tola_lab.gpu_check.run's (the tool parses before the heavy imports)
STEPS = ('smoke', 'demo_model', 'rrdb_baseline', 'memory', 'precision', 'inference', 'cuda_tests', 'resume',
         'shared_gpu')
DEFAULT_STEPS = tuple(s for s in STEPS if s not in ('demo_model', 'rrdb_baseline'))  # they take all the time given


def parse_steps(value: str):
    names = [s.strip() for s in value.split(',') if s.strip()]
    unknown = [s for s in names if s not in STEPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f'--steps: {", ".join(unknown) or "nothing"} is not a step of '
                                         f'{", ".join(STEPS)}')
    return names


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('report_dir', help='folder of the report (gpu_check.md, gpu_check.json)')
    parser.add_argument('--dry-run', action='store_true',
                        help='on the CPU (CUDA replaced by the CPU): tiny network, a few iterations')
    parser.add_argument('--bundle', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help='the checkout or bundle folder (default: the one this tool is in)')
    parser.add_argument(
        '--data', help='the folder of the carried data (data/, fixtures/, MANIFEST.json; default: '
        'the bundle folder)')
    parser.add_argument('--work', help='folder of the runs\' files (default: a new temporary folder)')
    parser.add_argument(
        '--deadline', type=float, default=540,
        help='seconds the whole check may take (default 540): a step whose estimate does not fit '
        'the time left is skipped, one that runs past it is killed')
    parser.add_argument(
        '--steps', type=parse_steps, default=list(DEFAULT_STEPS),
        help=f'comma-separated steps to run, in their fixed order (of {",".join(STEPS)}; default: all '
        f'but demo_model and rrdb_baseline, which train with all the time left)')
    args = parser.parse_args(argv)
    if args.deadline <= 0:
        parser.error(f'--deadline must be positive, got {args.deadline:g}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.gpu_check.run import run_gpu_check
    command = 'gpu_check.sh ' + ' '.join(sys.argv[1:] if argv is None else argv)
    return run_gpu_check(args.report_dir, args.bundle, args.data, args.dry_run, args.work, command, args.deadline,
                         args.steps)


if __name__ == '__main__':
    run_command(main, parse_args)
