#!/usr/bin/env python
r"""Where a one-step restoration's error comes from: the IDM's ε error amplified ~102x at t = 999, next to the
error of the LR latent itself, what the LRC leaves of it, and the VAE's ceilings (docs/demo_backbone.md,
"Why the CPU-trained backbone could not beat its input").

    python tools/one_step_error.py -opt options/demo/test_TOLA_demo.yml              # the demo's TOLA model
    python tools/one_step_error.py -opt options/demo/test_TOLA_demo.yml --frozen     # the backbone alone

Runs on the option file's test dataset (a TextDegradationDataset with a fixed seed), with the adaptation
checkpoint of path.pretrain_network_g (or --checkpoint); --frozen drops LoRA and LRC (the frozen one-step
route). Prints one line per quantity and writes them to --out (JSON) when given.
"""
import argparse

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='a TOLA test option file with one TextDegradationDataset')
    parser.add_argument('--checkpoint', help='adaptation checkpoint (default: path.pretrain_network_g)')
    parser.add_argument('--frozen', action='store_true', help='without LoRA and LRC: the frozen one-step backbone')
    parser.add_argument('--num', type=int, default=0, help='first N lines only (default: all)')
    parser.add_argument('--batch', type=int, default=8, help='lines per forward pass (default 8)')
    parser.add_argument('--out', help='write the results to this JSON file')
    args = parser.parse_args(argv)
    if args.frozen and args.checkpoint:
        parser.error('--frozen runs without adapters: drop --checkpoint')
    if args.batch < 1 or args.num < 0:
        parser.error('--batch must be >= 1 and --num >= 0')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.demo.one_step_error import measure_option_file  # torch and the networks: after parsing
    return measure_option_file(args.opt, args.checkpoint, args.frozen, args.num, args.batch, args.out)


if __name__ == '__main__':
    run_command(main, parse_args)
