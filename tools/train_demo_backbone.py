#!/usr/bin/env python
r"""Train the small demo backbone (VAE, TransOCR, IDM + MoM text encoder) on rendered, degraded text lines.

    python tools/train_demo_backbone.py -opt options/demo/train_demo_backbone.yml

Stages (docs/demo_backbone.md): line pool -> VAE -> TransOCR -> latent cache -> IDM + MoM. Each stage's result
is kept in ``work_dir`` (``<stage>.safetensors``) and reused when the tool is run again, so an interrupted run
resumes at the stage it was in (delete a stage file to retrain it; a new VAE or TransOCR also retrains the
IDM stage, which reads their latents and text priors). The result goes to ``output_dir`` (default: the package's
``tola_plugin/assets/demo/backbone``): ``difftsr_demo.safetensors``, ``transocr_demo.safetensors`` and ``manifest.json``
(how they were made).
Deterministic given ``seed`` and ``num_threads`` on a CPU. ``device: cuda`` in the option file trains on a GPU;
``--deadline`` stops a run in time (the stage in progress resumes next time), ``--init-dir`` continues from an
earlier run's stage files (docs/demo_backbone.md, "Training it on a GPU").
"""
import argparse
import sys

from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='option file (options/demo/train_demo_backbone.yml)')
    parser.add_argument('--work-dir', help='override work_dir (pool, stage files, log)')
    parser.add_argument('--output-dir', help='override output_dir (the three result files)')
    parser.add_argument(
        '--only', choices=('vae', 'transocr', 'idm'),
        help='train just this stage (and the line pool), e.g. in a second process while the main '
        'run trains the other; the main run then reuses it. idm: on latents of --init-dir\'s vae.safetensors, '
        'which it does not train (the stage file stays in work_dir: tools/ship_demo_model.py --idm-run installs it)')
    parser.add_argument(
        '--deadline', type=float, metavar='SECONDS',
        help='stop after SECONDS, keeping the current stage\'s partial file (exit status 3); the next run resumes it')
    parser.add_argument(
        '--init-dir', metavar='DIR',
        help='start each stage from DIR/<stage>.safetensors (an earlier run\'s work_dir, e.g. carried back from a '
        'GPU) instead of random weights')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.demo.training import train_demo_backbone
    command = 'python tools/train_demo_backbone.py ' + ' '.join(sys.argv[1:] if argv is None else argv)
    return train_demo_backbone(args.opt, args.work_dir, args.output_dir, args.only, command, args.deadline,
                               args.init_dir)


if __name__ == '__main__':
    run_command(main, parse_args)
