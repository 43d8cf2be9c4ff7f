#!/usr/bin/env python
"""Export a trained TOLA model as one merged, pickle-free safetensors file.

The network is built from a TOLA option file (its ``network_g``: backbone checkpoints and switches), the
adaptation state (LoRA + LRC) is loaded from a BasicSR checkpoint, LoRA is folded into the IDM and VAE
weights with peft (``merge_and_unload``), and every tensor is written with the rebuild options in the file's
metadata. ``TOLANet.from_merged(path)``, ``TOLANet.load_for_inference(path)`` and ``tola-infer --model``
read it back (on a CPU the inference entry points convert its IDM and VAE for OpenVINO on first use and cache them:
docs/inference.md, "Backends").

    python tools/export_merged.py -opt options/test/test_TOLA.yml \\
        --checkpoint experiments/TOLA_CTR/models/net_g_latest.pth --out checkpoints/TOLA_merged.safetensors --verify
"""
import argparse
import os
import sys

import torch

import tola_plugin  # noqa: F401  (registers the archs)
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.utils.cli_errors import run_tool


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='TOLA option file (network_g, path.pretrain_network_g)')
    parser.add_argument('--checkpoint', help='adaptation checkpoint (default: path.pretrain_network_g)')
    parser.add_argument('--out', required=True, help='output .safetensors file')
    parser.add_argument('--verify', action='store_true',
                        help='compare the unmerged and merged outputs on a random input (full size: minutes)')
    args = parser.parse_args(argv)
    if not args.out.endswith('.safetensors'):
        parser.error('--out must end with .safetensors')
    net = TOLANet.from_options(args.opt, args.checkpoint)
    if args.verify:
        lq = torch.rand(1, 3, 128, 512, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            before = net(lq, noise_seeds=[0])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    net.save_merged(args.out)
    print(f'wrote {args.out} ({os.path.getsize(args.out) / 2 ** 20:.1f} MiB)')
    if args.verify:
        del net
        with torch.no_grad():
            after = TOLANet.from_merged(args.out)(lq, noise_seeds=[0])
        err = ((after - before).abs().max() / before.abs().max().clamp_min(1e-12)).item()
        print(f'merged vs unmerged: max relative difference {err:.2e}')
        if err > 1e-4:
            print('error: merged outputs differ from the unmerged model', file=sys.stderr)
            return 1
    return 0


if __name__ == '__main__':
    run_tool(main)
