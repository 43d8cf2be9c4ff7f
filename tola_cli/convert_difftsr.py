"""Convert the official DiffTSR.ckpt once to a safetensors file in our (diffusers) layout.

    tola-convert-difftsr checkpoints/DiffTSR.ckpt checkpoints/DiffTSR_tola.safetensors

The official file is read with weights_only=True and memory-mapped; TDM_Decoder is dropped unread. The output
holds ``idm.*``, ``vae.*``, ``mom.*`` tensors plus the component configs; ``load_difftsr`` (and every option
file's ``difftsr_checkpoint``) accepts it in place of the .ckpt and loads it faster (no pickle, no renaming).
"""
import argparse

from tola_cli.arguments import safetensors_path
from tola_cli.command import run_command
from tola_cli.defaults import DIFFTSR_COMPONENTS


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog='tola-convert-difftsr', description=__doc__.split('\n')[0])
    parser.add_argument('input', help='official DiffTSR.ckpt')
    parser.add_argument('output', type=safetensors_path, help='output .safetensors')
    parser.add_argument('--components', nargs='+', default=list(DIFFTSR_COMPONENTS), choices=DIFFTSR_COMPONENTS)
    parser.add_argument('--verify', action='store_true', help='reload the output and compare every tensor')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from tola_plugin.commands.weight_files import convert_difftsr
    return convert_difftsr(args.input, args.output, args.components, args.verify)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
