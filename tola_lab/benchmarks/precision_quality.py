"""The precisions' quality on trained weights: the held-out lines restored by each backend in each precision, PSNR
against HR and against fp32, and whether the text prior stays the same."""
import statistics
import warnings
from typing import Dict, Optional, Sequence

import torch

from tola_lab.benchmarks.inference_routes import load_route
from tola_plugin.data.image_io import tensor_to_uint8
from tola_plugin.data.text_degradation_dataset import TextDegradationDataset, held_out_dataset_opt
from tola_plugin.metrics.image_metrics import psnr_y8
from tola_plugin.options.reader import read_option_file
from tola_plugin.runtime.serving import NoPathLeft


def quality(merged: str, test_opt: str, backends: Sequence[str], precisions: Sequence[str],
            limit: Optional[int] = None) -> Dict:
    """The held-out lines of ``test_opt`` (its one TextDegradationDataset) restored with the merged model in each
    backend and precision: mean PSNR (Y, 8-bit, as the demo report) against HR and against the same backend's fp32,
    and the share of lines whose text-prior ids equal fp32's (torch's fp32 for every row)."""
    opt = read_option_file(test_opt)
    dataset = TextDegradationDataset(held_out_dataset_opt(opt, test_opt))
    items = [dataset[i] for i in range(len(dataset) if limit is None else min(limit, len(dataset)))]
    lq = torch.stack([it['lq'] for it in items]).float()
    hr = [tensor_to_uint8(it['gt']) for it in items]
    rows, ref_tokens, passed_over = {}, None, {}
    for backend in backends:
        fp32_images = None
        for precision in ['fp32'] + [p for p in precisions if p != 'fp32']:
            try:
                net, runtime = load_route(f'{backend} {precision}', merged, 'cpu')
            except NoPathLeft as err:
                passed_over[f'{backend} {precision}'] = str(err)
                continue
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter('ignore')
                out = net(lq, noise_seeds=list(range(len(items))), return_intermediates=True)
            images = list(tensor_to_uint8(out['image']))
            if ref_tokens is None:
                ref_tokens = out['tokens']
            fp32_images = fp32_images or images  # fp32 first; without it (disqualified) the first that ran
            rows[f'{backend} {precision}'] = {
                'psnr_vs_hr_db': statistics.mean(psnr_y8(a, b) for a, b in zip(images, hr)),
                'psnr_vs_fp32_db': statistics.mean(psnr_y8(a, b) for a, b in zip(images, fp32_images)),
                'same_text_prior': float((out['tokens'] == ref_tokens).all(1).float().mean()),
            }
            runtime.close()
            del net
    return {'lines': len(items), 'model': merged, 'test_opt': test_opt, 'rows': rows, 'passed_over': passed_over}
