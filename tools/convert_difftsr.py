"""Convert the official DiffTSR.ckpt once to a safetensors file in our (diffusers) layout.

    python tools/convert_difftsr.py checkpoints/DiffTSR.ckpt checkpoints/DiffTSR_tola.safetensors

The official file is read with weights_only=True and memory-mapped; TDM_Decoder is dropped unread. The output
holds ``idm.*``, ``vae.*``, ``mom.*`` tensors plus the component configs; ``load_difftsr`` (and every option
file's ``difftsr_checkpoint``) accepts it in place of the .ckpt and loads it faster (no pickle, no renaming).
"""
import argparse
import os
import sys

import torch

from tola_plugin.archs.backbone_builder import load_difftsr, save_converted
from tola_plugin.checkpoints.difftsr import COMPONENTS
from tola_plugin.utils.cli_errors import run_tool


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('input', help='official DiffTSR.ckpt')
    parser.add_argument('output', help='output .safetensors')
    parser.add_argument('--components', nargs='+', default=list(COMPONENTS), choices=COMPONENTS)
    parser.add_argument('--verify', action='store_true', help='reload the output and compare every tensor')
    args = parser.parse_args(argv)
    if not args.output.endswith('.safetensors'):
        parser.error(f'output must end with .safetensors, got {args.output!r}')
    nets = load_difftsr(args.input, args.components)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    save_converted(nets, args.output)
    n = sum(p.numel() for net in nets.values() for p in net.parameters())
    print(f'wrote {args.output}: {", ".join(nets)} ({n:,} parameters)')
    if args.verify:
        again = load_difftsr(args.output, args.components)
        for comp, net in nets.items():
            ref = again[comp].state_dict()
            for key, value in net.state_dict().items():
                if not torch.equal(value, ref[key]):
                    print(f'error: verify failed: {comp}.{key} differs', file=sys.stderr)
                    return 1
        print('verified: identical tensors')
    return 0


if __name__ == '__main__':
    run_tool(main)
