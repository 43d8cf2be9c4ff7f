#!/usr/bin/env python
"""Export a trained TOLA model as one merged, pickle-free safetensors file.

The network is built from a TOLA option file (its ``network_g``: backbone checkpoints and switches), the
adaptation state (LoRA + LRC) is loaded from a BasicSR checkpoint, LoRA is folded into the IDM and VAE
weights with peft (``merge_and_unload``), and every tensor is written with the rebuild options in the file's
metadata. ``TOLANet.from_merged(path)``, ``TOLANet.load_for_inference(path)`` and ``tola-infer --model``
read it back. ``--onnx`` also writes the IDM and VAE as ONNX files next to it (``<out without .safetensors>.onnx/``,
about 3.6 GB at full size, a minute or two) for ``load_for_inference(path, backend='onnxruntime')``
(docs/inference.md).

    python tools/export_merged.py -opt options/test/test_TOLA.yml \\
        --checkpoint experiments/TOLA_CTR/models/net_g_latest.pth --out checkpoints/TOLA_merged.safetensors --verify \\
        --onnx
"""
import argparse
import os
import sys

import torch

import tola_plugin  # noqa: F401  (registers the archs)
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.checkpoints.tola import build_tola_from_options, onnx_folder
from tola_plugin.utils.cli_errors import run_tool


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='TOLA option file (network_g, path.pretrain_network_g)')
    parser.add_argument('--checkpoint', help='adaptation checkpoint (default: path.pretrain_network_g)')
    parser.add_argument('--out', required=True, help='output .safetensors file')
    parser.add_argument('--verify', action='store_true',
                        help='compare the unmerged, merged (and ONNX) outputs on a random input (full size: minutes)')
    parser.add_argument('--onnx', action='store_true',
                        help='also write the IDM and VAE as ONNX files for the onnxruntime backend')
    parser.add_argument('--onnx-size', type=int, nargs=2, default=(128, 512), metavar=('H', 'W'),
                        help='image size of the ONNX stages (default: 128 512)')
    args = parser.parse_args(argv)
    if not args.out.endswith('.safetensors'):
        parser.error('--out must end with .safetensors')
    net = build_tola_from_options(args.opt, args.checkpoint)
    if args.verify:
        size = tuple(args.onnx_size) if args.onnx else (128, 512)
        lq = torch.rand(1, 3, *size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            before = net(lq, noise_seeds=[0])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    net.save_merged(args.out, onnx_size=args.onnx_size if args.onnx else None)
    print(f'wrote {args.out} ({os.path.getsize(args.out) / 2 ** 20:.1f} MiB)')
    if args.onnx:
        print(f'wrote the ONNX stages to {onnx_folder(args.out)}')
    if args.verify:
        del net
        loaders = {'merged': lambda: TOLANet.from_merged(args.out)}
        if args.onnx:
            loaders['onnxruntime'] = lambda: TOLANet.load_for_inference(args.out, backend='onnxruntime')
        for name, load in loaders.items():
            with torch.no_grad():
                after = load()(lq, noise_seeds=[0])
            err = ((after - before).abs().max() / before.abs().max().clamp_min(1e-12)).item()
            print(f'{name} vs unmerged: max relative difference {err:.2e}')
            if err > 1e-4:
                print(f'error: {name} outputs differ from the unmerged model', file=sys.stderr)
                return 1
    return 0


if __name__ == '__main__':
    run_tool(main)
