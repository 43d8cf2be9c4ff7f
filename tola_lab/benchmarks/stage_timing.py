"""Seconds of each of the six calls Algorithm 1 makes (``StageTimer``), one timed restore, and the median row of a
route's runs."""
import contextlib
import statistics
import time
import warnings
from collections import defaultdict
from typing import Dict, List, Optional

import torch

from tola_plugin.archs import stages
from tola_plugin.archs.stage_runner import StageRunner

LABELS = tuple(s.label for s in stages.STAGES)  # the timed stages as tables name them (``archs/stages.py``)


def uniform_precisions(precision: str) -> Dict[str, str]:
    """Timed stage -> ``precision`` ('fp32', 'bf16', 'fp16') for every stage, the text prior fp32."""
    return {s.label: precision if s.planned else 'fp32' for s in stages.STAGES}


def stage_precisions(plan) -> Dict[str, str]:
    """Timed stage -> the precision it computes in under the runtime plan ``plan`` (``RuntimePlan.to_dict``'s
    'stages'), the text prior fp32."""
    out = uniform_precisions('fp32')
    out.update({stages.LABEL[stage]: precision for stage, precision in plan.to_dict()['stages'].items()})
    return out


class StageTimer:
    """Wall-clock seconds of each stage of ``net``'s forward (``seconds``; ``current``: the stage running now, None
    between stages), without touching the network's attributes: a timing runner around the network's own, installed
    with ``TOLANet.running`` (the one way to change how a network runs). ``close`` puts the network back."""

    def __init__(self, net):
        self.seconds: Dict[str, float] = defaultdict(float)
        self.current: Optional[str] = None
        self._started = 0.0  # perf_counter() when the current stage began
        self.net = net
        self.sync = torch.cuda.synchronize if next(net.parameters()).is_cuda else (lambda: None)
        self.runner = TimedRunner(net.stage_runner, self)
        self._installed = contextlib.ExitStack()
        self._installed.enter_context(net.running(self.runner))

    def start(self, stage: str) -> None:
        self.sync()
        self.current, self._started = stage, time.perf_counter()

    def stop(self, stage: str) -> None:
        self.sync()
        self.seconds[stage] += time.perf_counter() - self._started
        self.current = None

    def timed(self, stage: str, fn, *args, **kwargs):
        self.start(stage)
        try:
            return fn(*args, **kwargs)
        finally:
            self.stop(stage)

    def close(self) -> None:
        """The network's own runner back (unless a runtime has installed another since: that one stays)."""
        if self.net.stage_runner is self.runner:
            self._installed.close()
        else:
            self._installed.pop_all()


class TimedRunner(StageRunner):
    """``inner``'s stages, each timed by ``timer`` (``timer.timed(label, fn, *args, **kwargs)``); everything else is
    ``inner``'s."""

    def __init__(self, inner: StageRunner, timer: StageTimer):
        self.inner, self.timer = inner, timer

    dtypes = property(lambda self: self.inner.dtypes)
    name = property(lambda self: self.inner.name)

    def stage_dtypes(self, net, device):
        return self.inner.stage_dtypes(net, device)


def _timed_verb(stage):
    return lambda self, *args, **kwargs: self.timer.timed(stage.label, getattr(self.inner, stage.verb), *args, **kwargs)


for _stage in stages.STAGES:  # one timed verb per stage of the table
    setattr(TimedRunner, _stage.verb, _timed_verb(_stage))


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
                     for s in LABELS}
    }
