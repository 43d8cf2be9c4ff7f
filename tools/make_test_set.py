#!/usr/bin/env python
"""Held-out HR text lines -> a fixed degraded test set in CTR-TSR-Test's layout: hr/, lr_x<s>/, labels.tsv.

Each line goes through TOLA's training degradation (``TextDegradationDataset``: Real-ESRGAN or BSRGAN at x<s>, fixed
``--seed``), so the test pairs are of the kind every method was trained on. ``hr/`` holds the 512x128 canvases (the
references of tools/evaluate.py), ``lr_x<s>/`` the LR lines at 512/s x 128/s, both PNG, named after the LMDB key
(``image-000000012.png``) or the image file; the test option files (options/test/, options/baselines/) read them as
they read CTR-TSR-Test (docs/own_data.md).

Example:
    python tools/make_test_set.py --lmdb datasets/own/lines.lmdb --index-list datasets/own/holdout/val_index.txt \
        --out datasets/own/test
"""
import argparse
import os

import cv2
import numpy as np

from tola_plugin.data.text_degradation_dataset import TextDegradationDataset
from tola_plugin.utils.cli_errors import UsageError, run_tool


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument('--lmdb', help='FudanVI LMDB of HR lines (tools/make_lmdb.py)')
    src.add_argument('--images', help='folder of HR lines named in --labels')
    p.add_argument('--labels', help='with --images: TSV filename<TAB>transcription')
    p.add_argument('--index-list', help='0-based indices of the lines to use (tools/split_dataset.py); default: all')
    p.add_argument('--out', required=True, help='new folder for hr/, lr_x<s>/ and labels.tsv')
    p.add_argument('--scale', type=int, default=4, choices=(2, 4), help='LR scale [4]')
    p.add_argument('--seed', type=int, default=1, help='degradation seed [1] (the validation seed of the option files)')
    args = p.parse_args(argv)
    if args.images and not args.labels:
        p.error('--images needs --labels')
    if args.lmdb and args.labels:
        p.error('--labels is for --images (an LMDB holds its labels)')
    return args


def write_png(path: str, rgb: np.ndarray) -> None:
    """float RGB (H,W,3) in [0,1] on 8-bit levels -> PNG."""
    bgr = cv2.cvtColor(np.round(rgb * 255.0).astype(np.uint8), cv2.COLOR_RGB2BGR)
    if not cv2.imwrite(path, bgr):
        raise OSError(f'could not write {path}')


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.path.exists(os.path.join(args.out, 'labels.tsv')):
        raise UsageError(f'{args.out} already holds a test set (labels.tsv); remove it or choose another --out')
    dataset = TextDegradationDataset({
        'name': 'test_set', 'phase': 'test', 'dataroot_gt': args.lmdb or args.images, 'labels': args.labels,
        'index_list': args.index_list, 'io_backend': {'type': 'lmdb' if args.lmdb else 'disk'}, 'seed': args.seed,
        'scales': [args.scale], 'lq_size': 'native'
    })
    hr_dir, lr_dir = os.path.join(args.out, 'hr'), os.path.join(args.out, f'lr_x{args.scale}')
    os.makedirs(hr_dir, exist_ok=True)
    os.makedirs(lr_dir, exist_ok=True)
    rows, seen = [], {}
    for index in range(len(dataset)):
        item = dataset[index]
        name = os.path.splitext(os.path.basename(item['gt_path']))[0] + '.png'
        if name in seen:
            raise UsageError(f'{item["gt_path"]} and {seen[name]} would both be written as {name}; rename one')
        seen[name] = item['gt_path']
        write_png(os.path.join(hr_dir, name), item['gt'].numpy().transpose(1, 2, 0))
        write_png(os.path.join(lr_dir, name), item['lq'].numpy().transpose(1, 2, 0))
        rows.append(f'{name}\t{item["text"]}\n')
    with open(os.path.join(args.out, 'labels.tsv'), 'w', encoding='utf-8') as f:  # last: marks a complete set
        f.writelines(rows)
    print(f'wrote {len(rows)} test pairs (x{args.scale}, seed {args.seed}) to {args.out}')
    return 0


if __name__ == '__main__':
    run_tool(main)
