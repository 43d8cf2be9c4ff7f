"""Seconds of each of the six calls Algorithm 1 makes (``StageTimer``), one timed restore, and the median row of a
route's runs."""
import statistics
import time
import warnings
from collections import defaultdict
from typing import Dict, List, Optional

import torch

from tola_plugin.archs.stage_runner import StageRunner

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
    """Wall-clock seconds of each stage of ``net``'s forward (``seconds``; ``current``: the stage running now, None
    between stages), without touching the network's attributes: the stages a runner computes (the text prior's
    reading, the VAE's encode and decode, the IDM) through a timing runner around the network's own, installed with
    ``TOLANet.use_stage_runner`` (the one way to change how a network runs); the MoM text encoder and the LRC, always
    the network's torch modules, through forward hooks. ``close`` puts the network back as it was."""

    def __init__(self, net):
        self.seconds: Dict[str, float] = defaultdict(float)
        self.current: Optional[str] = None
        self._started = 0.0  # perf_counter() when the current stage began
        self.net = net
        self.sync = torch.cuda.synchronize if next(net.parameters()).is_cuda else (lambda: None)
        self.runner = TimedRunner(net.stage_runner, self)
        net.use_stage_runner(self.runner)
        self.hooks = []
        for stage, module in (('MoM text', getattr(net.mom, 'text_encoder', None)), ('LRC', net.lrc)):
            if module is not None:
                self.hooks += [
                    module.register_forward_pre_hook(lambda *_, stage=stage: self.start(stage)),
                    module.register_forward_hook(lambda *_, stage=stage: self.stop(stage))
                ]

    def start(self, stage: str) -> None:
        self.sync()
        self.current, self._started = stage, time.perf_counter()

    def stop(self, stage: str) -> None:
        self.sync()
        self.seconds[stage] += time.perf_counter() - self._started
        self.current = None

    def timed(self, stage: str, fn, *args):
        self.start(stage)
        try:
            return fn(*args)
        finally:
            self.stop(stage)

    def close(self) -> None:
        """The network's own runner back (unless a runtime has installed another since), the hooks removed."""
        if self.net.stage_runner is self.runner:
            self.net.use_stage_runner(self.runner.inner)
        for hook in self.hooks:
            hook.remove()


class TimedRunner(StageRunner):
    """``inner``'s stages, each timed by ``timer``; everything else is ``inner``'s."""

    def __init__(self, inner: StageRunner, timer: StageTimer):
        self.inner, self.timer = inner, timer

    dtypes = property(lambda self: self.inner.dtypes)
    name = property(lambda self: self.inner.name)

    def stage_dtypes(self, net, device):
        return self.inner.stage_dtypes(net, device)

    def encode(self, net, image):
        return self.timer.timed('VAE encode', self.inner.encode, net, image)

    def denoise(self, net, sample, timestep, context):
        return self.timer.timed('IDM', self.inner.denoise, net, sample, timestep, context)

    def decode(self, net, latent):
        return self.timer.timed('VAE decode', self.inner.decode, net, latent)

    def read_text(self, net, images, max_steps, incremental, stop_at_end):
        return self.timer.timed('text prior', self.inner.read_text, net, images, max_steps, incremental, stop_at_end)


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
