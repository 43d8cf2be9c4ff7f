"""Export a trained TOLA model as one merged, pickle-free safetensors file.

The network is built from a TOLA option file (its ``network_g``: backbone checkpoints and switches), the
adaptation state (LoRA + LRC) is loaded from a BasicSR checkpoint, LoRA is folded into the IDM and VAE
weights with peft (``merge_and_unload``), and every tensor is written with the rebuild options in the file's
metadata. ``TOLANet.from_merged(path)``, ``TOLANet.load_for_inference(path)`` and ``tola-infer --model``
read it back (on a CPU the inference entry points convert its IDM and VAE for OpenVINO on first use and cache them:
docs/inference.md, "Backends").

    # a model trained on the demo backbone (docs/own_data.md): the paper's test file, the same override as training
    tola-export-merged -opt $TOLA_PLUGIN/options/test/test_TOLA.yml --force_yml network_g:backbone_init=demo \\
        --checkpoint experiments/TOLA_own/models/net_g_latest.pth --out TOLA_own_merged.safetensors --verify
    # the paper's model, on the official DiffTSR.ckpt and transocr.pth in checkpoints/
    tola-export-merged -opt options/test/test_TOLA.yml \\
        --checkpoint experiments/TOLA_CTR/models/net_g_latest.pth --out checkpoints/TOLA_merged.safetensors --verify

The file is written with the mode the user's umask gives a new file (e.g. 0644 under umask 022).
"""
import argparse

from tola_cli.arguments import safetensors_path
from tola_cli.command import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog='tola-export-merged', description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='TOLA option file (network_g, path.pretrain_network_g)')
    parser.add_argument(
        '--checkpoint', help='adaptation checkpoint (default: path.pretrain_network_g); demo: the demo model\'s '
        'adaptation shipped with the package (with network_g:backbone_init=demo)')
    parser.add_argument(
        '--force_yml', nargs='+', default=[], metavar='KEY:SUBKEY=VALUE',
        help="change the option file's values as the launchers' --force_yml does, e.g. network_g:backbone_init=demo")
    parser.add_argument('--out', required=True, type=safetensors_path, help='output .safetensors file')
    parser.add_argument('--verify', action='store_true',
                        help='compare the unmerged and merged outputs on a random input (full size: minutes)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from tola_plugin.commands.weight_files import export_merged
    return export_merged(args.opt, args.out, args.checkpoint, args.verify, args.force_yml)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
