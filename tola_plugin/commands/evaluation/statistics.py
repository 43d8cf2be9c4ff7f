"""Paired uncertainty of the paper (supplementary Paired Uncertainty, Table S10).

- ``paired_bootstrap``: the change mean(b) - mean(a) between two methods evaluated on the same images and
  its 95% percentile interval from 5,000 filename-paired bootstrap resamples (images are resampled with
  replacement and both methods keep their values for the drawn image). scipy.stats.bootstrap does the
  resampling on the per-image differences, which is exactly the paired bootstrap of the mean difference.
- ``mcnemar_exact``: the exact (binomial) McNemar test on paired exact-match outcomes, two-sided.
"""
from dataclasses import asdict, dataclass
from typing import Dict, Sequence

import numpy as np
from scipy import stats

N_RESAMPLES = 5000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedChange:
    """mean(b) - mean(a) with its bootstrap interval [low, high] over n paired images."""
    change: float
    low: float
    high: float
    n: int
    n_resamples: int
    confidence: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def as_dict(self) -> Dict[str, float]:
        return asdict(self)


def _paired_arrays(a: Sequence[float], b: Sequence[float]):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f'paired values must be two 1-D arrays of equal length, got {a.shape} and {b.shape}')
    if a.size < 2:
        raise ValueError(f'need at least 2 paired values, got {a.size}')
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError('paired values contain NaN or infinity')
    return a, b


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_resamples: int = N_RESAMPLES,
                     confidence: float = CONFIDENCE, seed: int = 0, method: str = 'percentile') -> PairedChange:
    """Change of the mean from method a to method b and its paired bootstrap interval.

    a, b: per-image values of one metric, aligned by filename (length N). method: 'percentile' (default)
    or 'BCa' (scipy). The resampling is seeded, so the interval is reproducible.
    """
    a, b = _paired_arrays(a, b)
    diff = b - a
    change = float(diff.mean())
    if np.all(diff == diff[0]):  # degenerate: every resample has the same mean
        return PairedChange(change, change, change, diff.size, n_resamples, confidence)
    res = stats.bootstrap((diff, ), np.mean, n_resamples=n_resamples, confidence_level=confidence, method=method,
                          rng=np.random.default_rng(seed), vectorized=True)
    return PairedChange(change, float(res.confidence_interval.low), float(res.confidence_interval.high), diff.size,
                        n_resamples, confidence)


@dataclass(frozen=True)
class McNemarResult:
    """Discordant pairs (a right & b wrong, a wrong & b right) and the exact two-sided p-value."""
    only_a: int
    only_b: int
    p_value: float

    def as_dict(self) -> Dict[str, float]:
        return asdict(self)


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> McNemarResult:
    """Exact McNemar test: p = two-sided binomial test of only_b successes in only_a+only_b trials at 1/2.

    Concordant pairs do not enter the test. No discordant pairs gives p = 1.
    """
    a = np.asarray(a_correct, dtype=bool)
    b = np.asarray(b_correct, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f'paired outcomes must be two 1-D arrays of equal length, got {a.shape} and {b.shape}')
    only_a = int(np.sum(a & ~b))
    only_b = int(np.sum(~a & b))
    n = only_a + only_b
    p = 1.0 if n == 0 else float(stats.binomtest(only_b, n, 0.5, alternative='two-sided').pvalue)
    return McNemarResult(only_a, only_b, min(1.0, p))
