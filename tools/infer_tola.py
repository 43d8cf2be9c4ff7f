#!/usr/bin/env python
"""Restore a folder of LR text-line images with TOLA: restored PNGs + a per-image prior CSV.

Each image is resized to the 128x512 canvas (PIL bicubic, as the datasets and DiffTSR's inference), restored
once with per-image seeded noise (the same file gets the same noise in every run), and written as
``<out>/<stem>.png``. ``<out>/prior.csv`` lists the text prior that conditioned it (docs/evaluation.md, "Prior
CSV"): filename, prior_text, prior_confidence (mean token confidence), prior_token_confidences.

    python tools/infer_tola.py --merged checkpoints/TOLA_merged.safetensors --input LR_DIR --out results/TOLA
    python tools/infer_tola.py -opt options/test/test_TOLA.yml --input LR_DIR --out results/TOLA
"""
import argparse
import os
import sys

import cv2
import torch

import tola_plugin  # noqa: F401
from basicsr.utils import tensor2img

from tola_plugin.archs.tola_arch import TOLANet, image_noise_seed
from tola_plugin.data.image_io import IMAGE_EXTENSIONS, read_image_file
from tola_plugin.data.text_line_source import to_canvas
from tola_plugin.evaluation.records import write_prior_csv
from tola_plugin.utils.cli_errors import run_tool
from tola_plugin.utils.tola_loading import build_tola_from_options



def list_images(folder):
    if not os.path.isdir(folder):
        raise FileNotFoundError(f'input folder not found: {folder}')
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith(IMAGE_EXTENSIONS))
    if not names:
        raise ValueError(f'no images ({", ".join(IMAGE_EXTENSIONS)}) in {folder}')
    stems = [os.path.splitext(n)[0] for n in names]
    clash = sorted({s for s in stems if stems.count(s) > 1})
    if clash:
        raise ValueError(f'{folder}: several images share the stem(s) {clash[:5]}; outputs would overwrite each other')
    return names


def load_network(args):
    """The merged model, or the option file's network with its adaptation state, LoRA merged."""
    switches = {k: v for k, v in (('timestep', args.timestep), ('noise', args.noise)) if v is not None}
    if args.merged:
        return TOLANet.from_merged(args.merged, **switches)
    net = build_tola_from_options(args.opt, args.checkpoint)
    if args.timestep is not None:
        net.set_timestep(args.timestep)
    if args.noise is not None:
        net.noise = args.noise
    net.merge_lora()  # same outputs, no adapter overhead
    return net


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--merged', help='merged model from tools/export_merged.py')
    source.add_argument('-opt', help='TOLA option file (network_g + path.pretrain_network_g)')
    parser.add_argument('--checkpoint', help='with -opt: adaptation checkpoint (default: path.pretrain_network_g)')
    parser.add_argument('--input', required=True, help='folder of LR images')
    parser.add_argument('--out', required=True, help='output folder (PNGs + prior.csv)')
    parser.add_argument('--batch-size', type=int, default=1)
    parser.add_argument('--noise-seed', type=int, default=0,
                        help='base of the per-image noise seeds (as val.noise_seed)')
    parser.add_argument('--timestep', type=int, help='override the inference timestep (default: the model\'s)')
    parser.add_argument('--noise', choices=('gaussian', 'zero'), help='override the noise mode')
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error('--batch-size must be >= 1')

    names = list_images(args.input)
    net = load_network(args).to(args.device).eval()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for start in range(0, len(names), args.batch_size):
        batch = names[start:start + args.batch_size]
        lq = torch.stack([torch.from_numpy(to_canvas(read_image_file(os.path.join(args.input, n)))).permute(2, 0, 1)
                          for n in batch]).to(args.device)
        seeds = [image_noise_seed(n, args.noise_seed) for n in batch]
        with torch.no_grad():
            out = net(lq, noise_seeds=seeds, return_intermediates=True)
        for i, name in enumerate(batch):
            filename = os.path.splitext(name)[0] + '.png'
            cv2.imwrite(os.path.join(args.out, filename), tensor2img(out['image'][i], min_max=(0, 1)))
            text = out['prior_texts'][i] if out['prior_texts'] is not None else ''
            conf = out['confidences']
            token_conf = conf[i, :len(text)].tolist() if conf is not None else [1.0] * len(text)
            rows.append({'filename': filename, 'prior_text': text,
                         'prior_confidence': sum(token_conf) / len(token_conf) if token_conf else 0.0,
                         'prior_token_confidences': token_conf})
        print(f'{min(start + args.batch_size, len(names))}/{len(names)}', file=sys.stderr)
    write_prior_csv(os.path.join(args.out, 'prior.csv'), rows)
    print(f'wrote {len(rows)} images and prior.csv to {args.out}')
    return 0


if __name__ == '__main__':
    run_tool(main)
