"""Paired bootstrap intervals and the exact McNemar test against known answers."""
import numpy as np
import pytest

from tola_plugin.commands.evaluation.statistics import CONFIDENCE, N_RESAMPLES, mcnemar_exact, paired_bootstrap


def test_mcnemar_textbook_example():
    """Fagerland, Lydersen & Laake (2013, BMC Med Res Methodol 13:91), complete response table: discordant
    pairs b = 1, c = 7; exact conditional McNemar p = 0.070 (= 2 * 9/256 = 0.0703125)."""
    a = [True] * 1 + [False] * 7 + [True] * 10 + [False] * 5  # 1 only-a, 7 only-b, 15 concordant
    b = [False] * 1 + [True] * 7 + [True] * 10 + [False] * 5
    res = mcnemar_exact(a, b)
    assert (res.only_a, res.only_b) == (1, 7)
    assert res.p_value == pytest.approx(18 / 256)
    assert round(res.p_value, 3) == 0.070
    assert mcnemar_exact(b, a).p_value == pytest.approx(18 / 256)  # two-sided: symmetric


def test_mcnemar_edge_cases():
    assert mcnemar_exact([True, False], [True, False]).p_value == 1.0  # no discordant pairs
    assert mcnemar_exact([True, False], [False, True]).p_value == 1.0  # balanced
    # 10 discordant pairs all favouring b: p = 2 / 2**10
    assert mcnemar_exact([False] * 10, [True] * 10).p_value == pytest.approx(2 / 1024)
    with pytest.raises(ValueError):
        mcnemar_exact([True], [True, False])


def test_paired_bootstrap_covers_a_known_difference():
    rng = np.random.default_rng(1)
    n = 2000
    a = rng.normal(20.0, 3.0, n)  # large between-image spread (like PSNR)
    noise = rng.normal(0.0, 0.2, n)
    b = a + 0.3 + (noise - noise.mean())  # mean difference exactly 0.3
    res = paired_bootstrap(a, b)
    assert res.n_resamples == N_RESAMPLES == 5000 and res.confidence == CONFIDENCE == 0.95 and res.n == n
    assert res.change == pytest.approx(0.3, abs=1e-12)
    assert res.low < 0.3 < res.high and res.excludes_zero()
    # the percentile interval of a mean is about +-1.96 standard errors of the paired differences
    half = 1.96 * (b - a).std(ddof=1) / np.sqrt(n)
    assert (res.high - res.low) / 2 == pytest.approx(half, rel=0.1)
    # pairing matters: the unpaired spread (3.0) would give an interval ~20x wider
    assert res.high - res.low < 0.05
    assert paired_bootstrap(a, b) == res  # seeded: reproducible


def test_paired_bootstrap_null_difference_includes_zero():
    a = np.array([1.0] * 250 + [0.0] * 250)
    b = a.copy()
    b[:20] = 0.0  # 20 images lost ...
    b[250:270] = 1.0  # ... and 20 gained: the true change is exactly 0
    res = paired_bootstrap(a, b)
    assert res.change == 0.0
    assert res.low < 0 < res.high and not res.excludes_zero()
    assert mcnemar_exact(a > 0.5, b > 0.5).p_value == 1.0


def test_paired_bootstrap_degenerate_and_bad_input():
    res = paired_bootstrap([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    assert (res.change, res.low, res.high) == pytest.approx((0.5, 0.5, 0.5))
    with pytest.raises(ValueError):
        paired_bootstrap([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        paired_bootstrap([1.0, float('nan')], [1.0, 2.0])
