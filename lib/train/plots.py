"""Plots of training runs, drawn from their run directories' files (never from a caller's memory).

Why from the files: a plot must show what the runs recorded, so that anyone can redraw it from
``results/`` and a figure can never disagree with the ``events.jsonl`` beside it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from hipress.files import write_atomic

from .results import EVENTS, read_events


def accuracy_curve(run_dir: Path) -> tuple[list[float], list[float], list[float]]:
    """A run's evaluations: (training seconds, MiB sent by the busiest rank, test accuracy in %)."""
    evs = [e for e in read_events(Path(run_dir) / EVENTS) if e.get("event") == "evaluation"]
    return ([e["wall_s"] for e in evs], [max(e["bytes_sent"]) / 2**20 for e in evs],
            [100.0 * e["accuracy"] for e in evs])


def plot_time_to_accuracy(curves: dict[str, Sequence[Path]], target: float | None, path: Path, title: str) -> None:
    """Test accuracy against training time (left) and against bytes sent (right), one colour per variant.

    ``curves`` maps a variant's label to its run directories (one per round; later rounds dashed).
    ``target`` (a fraction) is drawn as a horizontal line. Written atomically as a PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, dirs) in enumerate(curves.items()):
        for r, run_dir in enumerate(dirs):
            wall, mib, acc = accuracy_curve(run_dir)
            style = {"color": colors[i % len(colors)], "linestyle": "-" if r == 0 else "--", "marker": ".",
                     "label": label if r == 0 else None, "alpha": 1.0 if r == 0 else 0.6}
            ax_t.plot(wall, acc, **style)
            ax_b.plot(mib, acc, **style)
    for ax in (ax_t, ax_b):
        if target is not None:
            ax.axhline(100.0 * target, color="grey", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    ax_t.set_xlabel("training time (s; evaluations and warm-up excluded)")
    ax_b.set_xlabel("MiB sent by the busiest rank")
    ax_b.set_xscale("symlog", linthresh=0.01)  # compressors send 10-30x less: log, with 0 at the start
    ax_b.set_xlim(left=0)
    ax_t.set_ylabel("test accuracy (%)")
    ax_t.legend(loc="lower right", fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_atomic(path, buf.getvalue())
