"""The bounds of a run's options, checked before anything is started or written.

Why bounds at all: a value far outside what a run can use was taken silently and failed later, after
the run directory was made (an OverflowError), or took the machine down (``--np 10^6`` processes,
``--batch-size 10^12``). Each bound below is generous for real use and says why it is where it is;
every error names the option, the value and the bound, so the user can fix the command line.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..bounds import out_of_bounds

#: Ranks of one run. HiPress's largest setting is 16 nodes x 8 GPUs = 128; 1024 leaves room for
#: bigger clusters while refusing a typo that would start a million processes.
MAX_RANKS = 1024
#: Samples per rank and iteration: the paper's largest per-GPU batch is 128 images (VGG19) or
#: 64k tokens' worth of sequences; 65536 samples is far beyond any of them.
MAX_BATCH = 65536
#: Image side in pixels: the paper uses 224 (256 for UGATIT); 4096 is already 330x the pixels.
MAX_INPUT_SIZE = 4096
#: Sequence length in tokens (BERT itself stops at 512; the transformer and LSTM take longer ones).
MAX_SEQ_LEN = 65536
#: Threads per rank (0 is automatic: this host's cores / ranks on it).
MAX_THREADS = 1024
#: Iterations (measured or warm-up) of one run.
MAX_ITERS = 10_000_000
#: The data seed (the synthetic data mixes it with the rank; 32 bits keep that exact).
MAX_SEED = 2**32 - 1
#: A gradient smaller than this many elements is never compressed by the threshold rule (see run --help).
MAX_COMP_THRESHOLD = 2**40

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@,-]{0,199}$")


class ConfigError(ValueError):
    """A run that cannot start; the message says what was wrong and what to use instead."""


def _int_in(option: str, value: Any, low: int, high: int, hint: str = "") -> None:
    if (why := out_of_bounds(option, value, low, high, hint)) is not None:
        raise ConfigError(why)


def check_run_id(run_id: str | None) -> None:
    """A run id is one directory name: no path separators, no '..', nothing a shell would mangle."""
    if run_id is None:
        return
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id) or run_id in (".", ".."):
        raise ConfigError(
            f"--run-id {run_id!r} is not a single directory name; use 1-200 letters, digits and . _ + = @ , - "
            "(starting with a letter or digit, no '/')")


def check_numbers(
    *, np: int, iters: int, warmup: int, batch_size: int | None = None, input_size: int | None = None,
    seq_len: int | None = None, lr: float | None = None, momentum: float | None = None, threads: int = 0,
    seed: int = 0, comp_threshold: int | None = None,
) -> None:
    """Every numeric option of ``hipress run`` within its bound (``ConfigError`` naming it otherwise)."""
    _int_in("--np", np, 1, MAX_RANKS, " (the bound is hipress.train.validate.MAX_RANKS)")
    _int_in("--iters", iters, 1, MAX_ITERS)
    _int_in("--warmup", warmup, 0, MAX_ITERS)
    if batch_size is not None:
        _int_in("--batch-size", batch_size, 1, MAX_BATCH, " samples per rank")
    if input_size is not None:
        _int_in("--input-size", input_size, 1, MAX_INPUT_SIZE, " pixels")
    if seq_len is not None:
        _int_in("--seq-len", seq_len, 1, MAX_SEQ_LEN, " tokens")
    _int_in("--threads", threads, 0, MAX_THREADS, " (0: automatic)")
    _int_in("--seed", seed, 0, MAX_SEED)
    if comp_threshold is not None:
        _int_in("--comp-threshold", comp_threshold, 0, MAX_COMP_THRESHOLD, " elements (0 compresses every gradient)")
    if lr is not None and not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ConfigError(f"--lr must be a finite number > 0, got {lr}")
    if momentum is not None and not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
        raise ConfigError(f"--momentum must be in [0, 1), got {momentum}")
