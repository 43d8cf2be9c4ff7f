"""Seconds of each of the six calls Algorithm 1 makes (``StageTimer``), one timed restore, and the median row of a
route's runs."""
import statistics
import time
import warnings
from collections import defaultdict
from typing import Dict, List, Optional

import torch

STAGES = ('text prior', 'VAE encode', 'MoM text', 'IDM', 'LRC', 'VAE decode')
#: the timed stage of each stage of a runtime plan (``archs/precision.STAGE_NAMES``); the text prior is fp32 always
TIMED_STAGE = {'vae_encoder': 'VAE encode', 'mom': 'MoM text', 'idm': 'IDM', 'lrc': 'LRC', 'vae_decoder': 'VAE decode'}


def uniform_precisions(precision: str) -> Dict[str, str]:
    """Timed stage -> ``precision`` ('fp32', 'bf16', 'fp16') for every stage, the text prior fp32."""
    return {stage: 'fp32' if stage == 'text prior' else precision for stage in STAGES}


def stage_precisions(plan) -> Dict[str, str]:
    """Timed stage -> the precision it computes in under the runtime plan ``plan`` (``RuntimePlan.to_dict``'s
    'stages'), the text prior fp32."""
    out = uniform_precisions('fp32')
    out.update({TIMED_STAGE[stage]: precision for stage, precision in plan.to_dict()['stages'].items()})
    return out


class StageTimer:
    """Wall-clock seconds of each stage of ``net``'s forward, by wrapping the six calls Algorithm 1 makes (the VAE's
    and the IDM's on the network's stage runner, whichever runtime it is: make the timer after the runtime decided);
    ``current``: the stage running now (None between stages)."""

    def __init__(self, net):
        self.seconds: Dict[str, float] = defaultdict(float)
        self.current: Optional[str] = None
        self.sync = torch.cuda.synchronize if next(net.parameters()).is_cuda else (lambda: None)
        runner = net.stage_runner
        for stage, owner, name in (('text prior', net, 'predict_text_prior'), ('VAE encode', runner, 'encode'),
                                   ('MoM text', net, 'text_context'), ('IDM', runner, 'denoise'),
                                   ('VAE decode', runner, 'decode')) + ((
                                       ('LRC', net.lrc, 'forward'), ) if net.lrc is not None else ()):
            setattr(owner, name, self._timed(stage, getattr(owner, name)))

    def _timed(self, stage, fn):

        def run(*args, **kwargs):
            self.sync()
            start, self.current = time.perf_counter(), stage
            try:
                out = fn(*args, **kwargs)
                self.sync()
            finally:
                self.current = None
            self.seconds[stage] += time.perf_counter() - start
            return out

        return run


def restore(net, timer: StageTimer, lq):
    """One forward of ``net`` on ``lq`` (per-image seeds 0..B-1) -> (output dict, total seconds, stage seconds)."""
    timer.seconds.clear()
    timer.sync()
    start = time.perf_counter()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter('ignore')  # an explicit bf16 where it is emulated warns once per call
        out = net(lq, noise_seeds=list(range(lq.shape[0])), return_intermediates=True)
    timer.sync()
    return out, time.perf_counter() - start, dict(timer.seconds)


def median_row(runs: List[Dict], batch: int) -> Dict:
    total = statistics.median(r['total'] for r in runs)
    return {
        'batch': batch, 'runs': len(runs), 'total_s': total, 'per_image_s': total / batch,
        'images_per_s': batch / total, 'all_totals_s': [r['total'] for r in runs],
        'stages_s': {s: statistics.median(r['stages'].get(s, 0.0) for r in runs)
                     for s in STAGES}
    }
