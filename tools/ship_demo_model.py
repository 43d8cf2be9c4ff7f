#!/usr/bin/env python
r"""Install a trained demo model into the package and record its scores, measured on the stored files
(docs/demo_backbone.md, "Shipping a demo model").

    # an adaptation (LoRA + LRC) of the shipped backbone, e.g. a longer CPU run's:
    python tools/ship_demo_model.py --adaptation experiments/NAME/models/net_g_latest.pth --provenance run.json
    # the shipped adaptation re-measured with a TransOCR trained on (docs/demo_backbone.md, "The TransOCR trained on"):
    python tools/ship_demo_model.py --transocr-run options/demo/train_demo_backbone_transocr_on.yml \
        --adaptation tola_plugin/assets/demo/backbone/tola_demo_adaptation.pth --provenance run.json
    # an IDM trained on with the exact one-step path, and its adaptation (docs/demo_backbone.md, "The one-step path"):
    python tools/ship_demo_model.py --idm-run options/demo/train_demo_backbone_one_step_path.yml \
        --adaptation experiments/NAME/models/net_g_latest.pth --provenance run.json
    # a backbone and adaptation the GPU check's demo_model step brought back (its report's demo_model/ folder):
    python tools/ship_demo_model.py --backbone-state build/demo_model_state \
        --adaptation build/demo_model_state/adaptation.pth --provenance run.json

Writes tola_plugin/assets/demo/backbone/ (the backbone files in float16 and manifest.json with --backbone-state;
tola_demo_adaptation.pth and .json), after restoring make demo's 32 held-out lines with the test launcher
(build/ship_demo_model/results/demo_TOLA_shipped/: images, metrics.json, grid.png). ``--provenance``: a JSON file of
how the adaptation was made (what, commands, option_file, objective, iterations, batch_size, num_threads,
training_seconds, machine, date), copied into the record.
"""
import argparse
import json
import os
import sys

from tola_cli.command import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGE_RUNS = {'transocr': 'a TransOCR', 'idm': 'an IDM'}  # installed in this order


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--adaptation', required=True, help='adaptation checkpoint (BasicSR net_g_*.pth of TOLAModel)')
    parser.add_argument('--provenance', required=True, help='JSON file: how the adaptation was made')
    parser.add_argument(
        '--backbone-state', help='stage files of a backbone trained elsewhere (vae, idm, transocr '
        '.safetensors + stages.json) to install first')
    for stage, what in STAGE_RUNS.items():
        parser.add_argument(
            f'--{stage}-run', metavar='OPT', help=f'option file of {what} trained on from the shipped one '
            f'(train_demo_backbone.py --only {stage} --init-dir): its stage file installed first')
    parser.add_argument('--work', default=os.path.join('build', 'ship_demo_model'), help='results folder')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_lab.demo.report import report_table
    from tola_lab.demo.shipping import install_backbone, install_stage, ship_adaptation
    with open(args.provenance, encoding='utf-8') as f:
        provenance = json.load(f)
    command = 'python tools/ship_demo_model.py ' + ' '.join(sys.argv[1:] if argv is None else argv)
    if args.backbone_state:
        install_backbone(args.backbone_state, command=command)
    for stage in STAGE_RUNS:
        if getattr(args, f'{stage}_run'):
            print(json.dumps(install_stage(stage, getattr(args, f'{stage}_run'), command=command), indent=1))
    record = ship_adaptation(args.adaptation, dict(provenance, shipped_with=command), ROOT, os.path.abspath(args.work))
    held = record['held_out']
    print(
        report_table({
            'held_out_lines': held['lines'], 'LR': held['LR'], 'TOLA': held['TOLA'],
            'TOLA_minus_LR': {k: held['TOLA'][k] - held['LR'][k]
                              for k in held['TOLA']}
        }))
    return 0


if __name__ == '__main__':
    run_command(main, parse_args)
