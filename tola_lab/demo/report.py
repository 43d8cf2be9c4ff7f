"""The demo's report (tools/demo_report.py): LR, restored and HR images side by side, metrics.json and a grid.

After ``python -m tola_plugin.test -opt <test option file>`` has restored the held-out lines, this rebuilds the
same held-out pairs from the option file's test dataset (a ``TextDegradationDataset`` with a fixed seed, so
the LR images are exactly those the network restored), writes ``lr/``, ``hr/`` and ``tola/`` (the restored
images, renamed to the LR file names) under ``results/<name>/``, evaluates LR and TOLA against HR with
tools/evaluate.py's runner (PSNR/SSIM on Y, PP-OCRv4 and TransOCR ACC/NED), and writes ``metrics.json`` and
``grid.png`` / ``grid.pdf`` (LR | TOLA | HR for a few lines, with what PP-OCRv4 read in each).
"""
import json
import os
import shutil
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from tola_plugin.archs.backbone_builder import load_transocr, transocr_checkpoint_of
from tola_plugin.checkpoints.demo_backbone import demo_adaptation_record
from tola_plugin.commands.evaluation import records as R
from tola_plugin.commands.evaluation.plots import comparison_grid, load_grid_rows
from tola_plugin.commands.evaluation.runner import evaluate_methods
from tola_plugin.data.image_io import read_image_file, tensor_to_uint8, write_image
from tola_plugin.data.text_degradation_dataset import TextDegradationDataset, held_out_dataset_opt
from tola_plugin.inference.color_fix import COLOR_FIXES, apply_color_fix
from tola_plugin.metrics.image_metrics import mean_psnr_y8
from tola_plugin.ocr.ppocr import ppocrv4_unavailable
from tola_plugin.options.reader import read_option_file

#: The issue's targets for the demo on the held-out lines: gains of TOLA over its LR input.
TARGETS = {'psnr': 2.0, 'p_acc': 0.15}
METHODS = ('LR', 'TOLA')


def export_pairs(opt: Dict, opt_path: str, results_root: str) -> List[str]:
    """Write ``lr/``, ``hr/``, ``tola/`` and ``labels.tsv`` under ``results_root``; returns the file names."""
    ds_opt = held_out_dataset_opt(opt, opt_path)
    dataset = TextDegradationDataset(ds_opt)
    suffix = (opt.get('val') or {}).get('suffix') or opt['name']
    restored_dir = os.path.join(results_root, 'visualization', ds_opt['name'])
    names, labels = [], []
    for index in range(len(dataset)):
        item = dataset[index]
        stem = os.path.splitext(os.path.basename(item['lq_path']))[0]
        restored = os.path.join(restored_dir, f'{stem}_{suffix}.png')
        if not os.path.isfile(restored):
            raise FileNotFoundError(f'restored image {restored!r} not found: run python -m tola_plugin.test -opt '
                                    f'{opt_path} first')
        name = f'{stem}.png'
        write_image(os.path.join(results_root, 'lr', name), tensor_to_uint8(item['lq']), order='RGB')
        write_image(os.path.join(results_root, 'hr', name), tensor_to_uint8(item['gt']), order='RGB')
        os.makedirs(os.path.join(results_root, 'tola'), exist_ok=True)
        shutil.copyfile(restored, os.path.join(results_root, 'tola', name))
        names.append(name)
        labels.append(f'{name}\t{item["text"]}\n')
    with open(os.path.join(results_root, 'labels.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(labels)
    return names


def color_fix_psnr(results_root: str, names: Sequence[str]) -> Dict[str, float]:
    """Mean PSNR (Y, dB) against HR of the restored lines after each colour fix of ``--color-fix`` (the LR canvas
    as the colour reference, as TOLAPipeline applies it): what keeping the input's colours does on the held-out
    lines (docs/restore.md)."""

    def read(method, name):  # RGB uint8 -> (1, 3, H, W) in [0, 1]
        rgb = read_image_file(os.path.join(results_root, method, name), order='RGB')
        return torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255.0

    scores = {fix: [] for fix in COLOR_FIXES}
    for name in names:
        restored, lr = read('tola', name), read('lr', name)
        hr = read_image_file(os.path.join(results_root, 'hr', name), order='RGB')
        for fix in COLOR_FIXES:
            fixed = tensor_to_uint8(apply_color_fix(fix, restored, lr)[0], rounding='half_up')
            scores[fix].append(mean_psnr_y8([fixed], [hr]))
    return {fix: float(np.mean(values)) for fix, values in scores.items()}


def write_grid(results_root: str, names: Sequence[str], rows_by_method: Dict[str, Dict], prefix: str, out_stem: str,
               dpi: int = 200):
    """LR | TOLA | HR for ``names`` (one row each), each cell captioned with what recognizer ``prefix`` read
    (a tick when it equals the label under the evaluation's normalization)."""
    images = load_grid_rows([(m, os.path.join(results_root, m.lower())) for m in (*METHODS, 'HR')], names)
    recognizer = {'p_': 'PP-OCRv4', 't_': 'TransOCR'}[prefix]
    rows, captions = [], []
    for i, name in enumerate(names):
        lr_row = rows_by_method['LR'][name]
        rows.append((lr_row['gt'], [images[0][1][i], images[1][1][i], images[2][1][i]]))
        cells = []
        for method in METHODS:
            r = rows_by_method[method][name]
            cells.append(f'{recognizer}: {r[f"{prefix}pred"] or "(nothing)"} {"✓" if r[f"{prefix}acc"] else "✗"}')
        cells.append('')
        captions.append(cells)
    return comparison_grid(rows, out_stem, column_titles=['LR input', 'TOLA (one step)', 'HR reference'],
                           captions=captions, dpi=dpi)


def make_report(opt_path: str, grid_samples: int = 6, results_dir: Optional[str] = None, log=print) -> Dict:
    """Everything the module docstring lists; returns the metrics.json content."""
    opt = read_option_file(opt_path)
    results_root = results_dir or os.path.join('results', opt['name'])
    names = export_pairs(opt, opt_path, results_root)
    metrics = ['psnr', 'ssim', 'transocr']
    skipped = {}
    reason = ppocrv4_unavailable()
    if reason is None:
        metrics.append('ppocrv4')
    else:
        skipped['ppocrv4'] = reason
        log(f'demo report: PP-OCRv4 skipped: {reason}')
    transocr = load_transocr(transocr_checkpoint_of(opt['network_g']))
    eval_dir = os.path.join(results_root, 'eval')
    summary = evaluate_methods({m: os.path.join(results_root, m.lower())
                                for m in METHODS}, eval_dir, reference_dir=os.path.join(results_root, 'hr'),
                               labels_path=os.path.join(results_root, 'labels.tsv'), metrics=metrics,
                               transocr_model=transocr, lower=True, progress=False)
    with open(os.path.join(eval_dir, 'summary.json'), encoding='utf-8') as f:
        evaluated = json.load(f)
    gains = {k: summary['TOLA'][k] - summary['LR'][k] for k in summary['TOLA']}
    report = {
        'held_out_lines': len(names),
        'dataset': held_out_dataset_opt(opt, opt_path),
        **{m: summary[m]
           for m in METHODS},
        'TOLA_minus_LR': gains,
        'targets': {f'{k}_gain': v
                    for k, v in TARGETS.items()},
        'targets_met': {f'{k}_gain': bool(gains[k] >= v)
                        for k, v in TARGETS.items() if k in gains},
        'protocol': {
            'psnr_ssim': 'Y channel (BT.601), no border crop, 8-bit images',
            'case': 'lower-cased before matching (the demo TransOCR has no upper case; PP-OCRv4 default)',
            'transocr': 'the demo backbone\'s TransOCR (also the network\'s text-prior recognizer)',
            'ppocrv4': 'PP-OCRv4 mobile recognition (rapidocr-onnxruntime), recognition only',
            'skipped': skipped,
        },
        'per_image_csv': {m: os.path.join('eval', evaluated['per_image'][m])
                          for m in METHODS},
        'color_fix_psnr': color_fix_psnr(results_root, names),
    }
    with open(os.path.join(results_root, 'metrics.json'), 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
    rows = {m: R.read_per_image_csv(os.path.join(eval_dir, evaluated['per_image'][m])) for m in METHODS}
    prefix = 'p_' if 'ppocrv4' in metrics else 't_'
    write_grid(results_root, names[:grid_samples], rows, prefix, os.path.join(results_root, 'grid'))
    return report


def report_closing(report: Dict) -> str:
    """What the demo's last line says: TOLA against its LR input (above it in which scores, not in which), and the
    shipped demo adaptation's numbers on the same lines (the digits differ by CPU: docs/demo_backbone.md)."""
    gains = report['TOLA_minus_LR']
    shipped = demo_adaptation_record()
    held_out = shipped['held_out']['TOLA']
    parts = [f'PSNR {gains["psnr"]:+.2f} dB'] + ([f'PP-OCRv4 ACC {gains["p_acc"]:+.3f}'] if 'p_acc' in gains else [])
    ours = [f'PSNR {held_out["psnr"]:.2f} dB'] + ([f'PP-OCRv4 ACC {held_out["p_acc"]:.4f}'] if 'p_acc' in gains else [])
    names = {'psnr': 'PSNR', 'ssim': 'SSIM', 'p_acc': 'PP-OCRv4 ACC'}
    above = [names[k] for k in names if gains.get(k, 0) > 0]
    below = [names[k] for k in names if k in gains and gains[k] <= 0]
    verdict = (f'above its input in {", ".join(above)}' +
               (f', not in {", ".join(below)}' if below else '') if above else 'not above its input')
    return (f'TOLA against its LR input: {", ".join(parts)}: {verdict} (docs/demo_backbone.md, "The one-step path"); '
            f'the demo adaptation shipped with the package read {", ".join(ours)} on these lines '
            f'({shipped["machine"].split(",")[0]}, {shipped["num_threads"]} thread). Your digits may differ: training '
            f'rounds differently on another CPU or thread count, and 350 steps carry it into other weights '
            f'(docs/demo_backbone.md, "What varies by CPU").')


def report_table(report: Dict) -> str:
    """A short Markdown table of LR vs TOLA (what the demo prints at the end)."""
    keys = [k for k in ('psnr', 'ssim', 'p_acc', 'p_ned', 't_acc', 't_ned') if k in report['TOLA']]
    names = {  # the TransOCR here is the demo backbone's (protocol.transocr), not the official recognizer
        'psnr': 'PSNR (dB)', 'ssim': 'SSIM', 'p_acc': 'PP-OCRv4 ACC', 'p_ned': 'PP-OCRv4 NED',
        't_acc': 'demo TransOCR ACC', 't_ned': 'demo TransOCR NED'
    }
    lines = [
        f'| {report["held_out_lines"]} held-out lines | ' + ' | '.join(names[k] for k in keys) + ' |',
        '|---|' + '---:|' * len(keys)
    ]
    for m in METHODS:
        lines.append(f'| {m} | ' + ' | '.join(f'{report[m][k]:.4f}' for k in keys) + ' |')
    lines.append('| TOLA - LR | ' + ' | '.join(f'{report["TOLA_minus_LR"][k]:+.4f}' for k in keys) + ' |')
    if 'color_fix_psnr' in report:
        lines.append('')
        lines.append('colour fix, PSNR (dB) vs HR: ' + ', '.join(f'{fix} {value:.4f}'
                                                                 for fix, value in report['color_fix_psnr'].items()))
    return '\n'.join(lines)
