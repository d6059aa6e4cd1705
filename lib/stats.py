"""Statistics every benchmark reports: the median and a 95% confidence interval of it.

At the bottom of the layers (numpy only), so that ``compress``, ``sync``, ``train`` and the CLI's
benchmarks all report the same figure the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def median_ci(samples: Sequence[float], reps: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the median and a bootstrap 95% confidence interval of the median.

    ``reps`` resamples with replacement, seeded, so the same samples always give the same interval.
    One sample: the interval is that sample; none: NaNs.
    """
    a = np.asarray(samples, dtype=np.float64)
    if a.size == 0:
        nan = float("nan")
        return nan, nan, nan
    med = float(np.median(a))
    if a.size == 1:
        return med, med, med
    rng = np.random.default_rng(seed)
    meds = np.median(a[rng.integers(0, a.size, size=(reps, a.size))], axis=1)
    return med, float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))
