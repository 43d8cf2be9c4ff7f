"""Training pairs made online from HR text lines (paper §Datasets; DiffTSR's training dataset).

HR line -> bicubic 512x128 RGB in [0,1] -> one chain (Real-ESRGAN second order or BSRGAN) at a scale
drawn from {1,2,4} -> LR resized back to 512x128 with a random interpolation (linear, cubic,
Lanczos-4). Every random choice of sample ``index`` in epoch ``e`` comes from
SeedSequence([seed, e, index]), so pairs do not depend on the worker count or order.
``lq_size: native`` keeps the chain's LR at 512/s x 128/s instead (BasicSR's x s networks, the baselines), and
``gt_size`` crops aligned square patches; both leave the degradation itself unchanged.
"""
import math
from typing import Dict

import cv2
import numpy as np
import torch
from torch.utils import data

from basicsr.utils import get_root_logger
from basicsr.utils.registry import DATASET_REGISTRY

from tola_plugin.data.bsrgan_degradation import BSRGANDegradation
from tola_plugin.data.realesrgan_degradation import RealESRGANDegradation
from tola_plugin.data.sample_rng import sample_generator, sample_side_generator
from tola_plugin.data.text_labels import text_targets, usable_positions
from tola_plugin.data.text_line_source import CANVAS_H, CANVAS_W, build_line_source, to_canvas

LQ_INTERPOLATIONS = {'linear': cv2.INTER_LINEAR, 'cubic': cv2.INTER_CUBIC, 'lanczos4': cv2.INTER_LANCZOS4}
CHAINS = {'realesrgan': RealESRGANDegradation, 'bsrgan': BSRGANDegradation}
ERROR_POLICIES = ('raise', 'retry', 'skip')
LQ_SIZES = ('canvas', 'native')
CROP_STREAM = 1  # sample_side_generator stream of the gt_size crop position


class DegradationError(RuntimeError):
    """A degradation chain failed on one sample."""


def _probabilities(values, names, what):
    """Validated probability list aligned with ``names``; ``None`` = uniform."""
    if values is None:
        return [1.0 / len(names)] * len(names)
    if isinstance(values, dict):
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise KeyError(f'{what}: unknown name(s) {unknown}; known: {names}')
        values = [float(values.get(n, 0.0)) for n in names]
    values = [float(v) for v in values]
    if len(values) != len(names) or min(values) < 0 or not math.isclose(sum(values), 1.0, abs_tol=1e-6):
        raise ValueError(f'{what} must give {len(names)} non-negative probabilities summing to 1 for {names}, '
                         f'got {values}')
    return values


@DATASET_REGISTRY.register()
class TextDegradationDataset(data.Dataset):
    """Online-degraded text-line pairs on the 512x128 canvas.

    Options (BasicSR dataset dict; defaults in brackets):
        dataroot_gt: FudanVI LMDB folder (``io_backend.type: lmdb``) or image folder (``disk``).
        labels: TSV ``filename<TAB>transcription`` (disk only). index_list: 0-based index file [None].
        seed [0]; chain_probs [{realesrgan: 0.5, bsrgan: 0.5}]; scales [[1, 2, 4]]; scale_probs [uniform];
        lq_interpolations [[linear, cubic, lanczos4]]; realesrgan / bsrgan: chain parameter overrides [{}];
        idm_text_norm ['lower' = DiffTSR]; skip_invalid_labels [False];
        on_degradation_error ['raise' | 'retry' | 'skip']; max_retries [3]; epoch [0] (the first epoch's
        degradations; BasicSR's sampler sets it afterwards); background [[255, 255, 255]]: RGB colour under
        transparent pixels (RGBA/LA/palette images); lq_size ['canvas' | 'native']: the LR resized back to
        the canvas (TOLA) or as the chain made it, 128/s x 512/s (needs one scale in ``scales``, equal to the
        option file's ``scale``); gt_size [None]: a random square crop of that size (at most 128, divisible
        by the LR's scale) from the pair, at the same place in LR and HR.
        Any other key (besides BasicSR's loader keys) is an error (options/checks.py).

    Item: ``lq`` (3,128,512) float32 RGB in [0,1] ((3,128/s,512/s) with ``lq_size: native``), ``gt``
    (3,128,512) (both cropped with ``gt_size``); ``lq_path`` = ``gt_path`` = LMDB key or file path; ``text`` raw
    transcription; ``idm_tokens`` (24,) int64; ``ocr_target`` (25,) int64 (END, then -100).

    ``index`` may exceed ``len(self)`` (``EnlargedSampler`` visits, see tola_plugin/basicsr_glue/enlarged_sampler.py):
    sample ``index % len`` is read and ``index`` itself seeds the degradation.
    """

    accepts_enlarged_indices = True
    option_keys = frozenset({
        'dataroot_gt', 'labels', 'index_list', 'seed', 'epoch', 'chain_probs', 'scales', 'scale_probs',
        'lq_interpolations', 'realesrgan', 'bsrgan', 'idm_text_norm', 'skip_invalid_labels', 'on_degradation_error',
        'max_retries', 'background', 'lq_size', 'gt_size'
    })

    def __init__(self, opt: dict):
        super().__init__()
        self.opt = opt
        self.logger = get_root_logger()
        if opt.get('persistent_workers') and opt.get('num_worker_per_gpu', 0) > 0:
            raise ValueError('TextDegradationDataset needs persistent_workers: false, otherwise the workers '
                             'never see set_epoch and repeat the first epoch\'s degradations')
        self.source = build_line_source(opt, 'dataroot_gt')
        self.seed = int(opt.get('seed', 0))
        self.epoch = int(opt.get('epoch', 0))
        self.idm_text_norm = opt.get('idm_text_norm', 'lower')

        self.chain_names = list(CHAINS)
        self.chain_probs = _probabilities(
            opt.get('chain_probs', {'realesrgan': 0.5, 'bsrgan': 0.5}), self.chain_names, 'chain_probs')
        self.chains = {name: cls(**(opt.get(name) or {})) for name, cls in CHAINS.items()}
        self.scales = [int(s) for s in opt.get('scales', [1, 2, 4])]
        bad = [s for s in self.scales if s < 1 or CANVAS_H % s or CANVAS_W % s]
        if not self.scales or bad:
            raise ValueError(f'scales must be divisors of {CANVAS_H} and {CANVAS_W}, got {self.scales}')
        self.scale_probs = _probabilities(opt.get('scale_probs'), self.scales, 'scale_probs')
        names = opt.get('lq_interpolations', list(LQ_INTERPOLATIONS))
        unknown = [n for n in names if n not in LQ_INTERPOLATIONS]
        if not names or unknown:
            raise ValueError(f'lq_interpolations must be a non-empty subset of {list(LQ_INTERPOLATIONS)}, got {names}')
        self.lq_interpolations = [LQ_INTERPOLATIONS[n] for n in names]
        self.native = self._lq_size_option(opt) == 'native'
        self.gt_size = self._gt_size_option(opt)

        self.on_error = opt.get('on_degradation_error', 'raise')
        if self.on_error not in ERROR_POLICIES:
            raise ValueError(f'on_degradation_error must be one of {ERROR_POLICIES}, got {self.on_error!r}')
        self.max_retries = int(opt.get('max_retries', 3))
        self.failures = {'retried': 0, 'skipped': 0}

        self.records = usable_positions(self.source.labels, self.source.key, self.idm_text_norm,
                                        bool(opt.get('skip_invalid_labels', False)), opt['dataroot_gt'],
                                        self.logger.warning)

    def _lq_size_option(self, opt: dict) -> str:
        lq_size = opt.get('lq_size', 'canvas')
        if lq_size not in LQ_SIZES:
            raise ValueError(f'lq_size must be one of {LQ_SIZES}, got {lq_size!r}')
        scale = opt.get('scale')
        if lq_size == 'canvas' and scale is not None and int(scale) > 1:
            raise ValueError(
                f'dataset {opt.get("name")!r}: with lq_size: canvas (the default) the LR lines are resized '
                f'back to 128x512, the input of TOLA (scale: 1), but the option file\'s scale is {scale} '
                f'(a x{scale} network such as BasicSR\'s): set scales: [{scale}] and lq_size: native')
        if lq_size == 'native':
            if len(self.scales) != 1:
                raise ValueError(f'lq_size: native needs one scale (LR images of one size per batch), got scales '
                                 f'{self.scales}; e.g. scales: [4] for a x4 network')
            if opt.get('scale') is not None and int(opt['scale']) != self.scales[0]:
                raise ValueError(f'lq_size: native makes x{self.scales[0]} pairs (scales: {self.scales}) but the '
                                 f'option file\'s scale is {opt["scale"]}; make them equal')
        return lq_size

    def _gt_size_option(self, opt: dict):
        gt_size = opt.get('gt_size')
        if gt_size is None:
            return None
        step = self.scales[0] if self.native else 1
        if (not isinstance(gt_size, int) or isinstance(gt_size, bool) or not 1 <= gt_size <= CANVAS_H
                or gt_size % step):
            raise ValueError(f'gt_size must be an integer in [1, {CANVAS_H}] divisible by the LR\'s scale ({step}), '
                             f'got {gt_size!r}')
        return gt_size

    def set_epoch(self, epoch: int):
        """Select the epoch whose degradations ``__getitem__`` reproduces."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.records)

    def _draw_plan(self, rng: np.random.Generator):
        chain = self.chain_names[int(rng.choice(len(self.chain_names), p=self.chain_probs))]
        scale = self.scales[int(rng.choice(len(self.scales), p=self.scale_probs))]
        interpolation = self.lq_interpolations[int(rng.integers(len(self.lq_interpolations)))]
        return chain, scale, interpolation

    def plan(self, index: int, attempt: int = 0):
        """``(chain name, scale, cv2 interpolation)`` that ``__getitem__(index)`` uses in this epoch."""
        return self._draw_plan(sample_generator(self.seed, self.epoch, index, attempt))

    def degrade(self, hr: np.ndarray, index: int, attempt: int = 0) -> np.ndarray:
        """HR RGB float32 (128,512,3) in [0,1] -> LR of the same shape (``lq_size: native``: (128/s,512/s,3)),
        in [0,1]."""
        rng = sample_generator(self.seed, self.epoch, index, attempt)
        chain, scale, interpolation = self._draw_plan(rng)
        lq = self.chains[chain](hr, scale, rng)
        expected = (CANVAS_H // scale, CANVAS_W // scale, 3)
        if lq.shape != expected or not np.isfinite(lq).all():
            raise DegradationError(f'{chain} x{scale} returned shape {lq.shape} (expected {expected}) '
                                   f'or non-finite values')
        if not self.native:
            lq = cv2.resize(lq, (CANVAS_W, CANVAS_H), interpolation=interpolation)
        # cubic / Lanczos overshoot: clip to keep the [0,1] contract (DiffTSR leaves it unclipped)
        return np.clip(lq, 0.0, 1.0).astype(np.float32)

    def _degrade_with_policy(self, hr, index, key):
        attempts = 1 + (self.max_retries if self.on_error == 'retry' else 0)
        for attempt in range(attempts):
            try:
                return self.degrade(hr, index, attempt)
            except Exception as err:  # noqa: BLE001  (re-raised with the sample named, or retried)
                message = f'degradation failed for sample {index} ({key}), attempt {attempt}: {err!r}'
                if attempt + 1 < attempts:
                    self.failures['retried'] += 1
                    self.logger.warning(f'{message}; retrying with a new random stream '
                                        f'(retries so far in this process: {self.failures["retried"]})')
                    continue
                raise DegradationError(message) from err

    def _item(self, index: int) -> dict:
        pos = self.records[index % len(self.records)]
        key, label = self.source.key(pos), self.source.labels[pos]
        hr = to_canvas(self.source.read(pos), CANVAS_W, CANVAS_H)
        lq = self._degrade_with_policy(hr, index, key)
        if self.gt_size is not None:
            hr, lq = self.crop(hr, lq, index)
        idm_tokens, ocr_target = text_targets(label, key, self.idm_text_norm)
        return {
            'lq': torch.from_numpy(np.ascontiguousarray(lq.transpose(2, 0, 1))),
            'gt': torch.from_numpy(np.ascontiguousarray(hr.transpose(2, 0, 1))),
            'lq_path': key,
            'gt_path': key,
            'text': label,
            'idm_tokens': idm_tokens,
            'ocr_target': ocr_target,
        }

    def crop(self, hr: np.ndarray, lq: np.ndarray, index: int):
        """The ``gt_size`` square of ``hr`` and the same region of ``lq`` (at 1/s with ``lq_size: native``), at a
        position drawn from the sample's crop stream (so the degradation is the one of the uncropped pair)."""
        step = CANVAS_H // lq.shape[0]
        rng = sample_side_generator(self.seed, self.epoch, index, CROP_STREAM)
        top = int(rng.integers((CANVAS_H - self.gt_size) // step + 1)) * step
        left = int(rng.integers((CANVAS_W - self.gt_size) // step + 1)) * step
        size = self.gt_size
        return (hr[top:top + size, left:left + size], lq[top // step:(top + size) // step,
                                                         left // step:(left + size) // step])

    def __getitem__(self, index: int) -> dict:
        if self.on_error != 'skip':
            return self._item(index)
        for offset in range(self.max_retries + 1):
            try:
                return self._item(index + offset)
            except DegradationError as err:
                self.failures['skipped'] += 1
                self.logger.warning(f'{err}; skipping to sample {(index + offset + 1) % len(self)} '
                                    f'(skips so far in this process: {self.failures["skipped"]})')
        raise DegradationError(f'sample {index} and the {self.max_retries} following samples all failed')

    def __repr__(self):
        return (f'{type(self).__name__}({self.opt.get("dataroot_gt")}, n={len(self)}, seed={self.seed}, '
                f'epoch={self.epoch})')


def held_out_dataset_opt(opt: Dict, path: str) -> Dict:
    """The one test dataset of the option file ``opt`` (read from ``path``, named in errors): a
    TextDegradationDataset with a fixed seed, as a val-phase dataset option; the held-out pairs that the test
    launcher restored, rebuilt exactly (demo report, inference benchmark, tools/one_step_error.py)."""
    datasets = [v for k, v in (opt.get('datasets') or {}).items() if k.startswith('test')]
    if len(datasets) != 1 or datasets[0].get('type') != 'TextDegradationDataset':
        raise ValueError(f'{path}: expected exactly one test dataset (datasets.test*) of type TextDegradationDataset')
    return dict(datasets[0], phase='val', scale=opt.get('scale', 1))
