"""Every figure point run once: from the cache when finished before, else run and cached at once.

Shared by both modes (a ``SimRunner`` with its ``PointCache``, a ``RealRunner`` with its
``RealCache``); how progress is shown is the caller's (the CLI passes its progress bar's callbacks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from hipress.sim.experiments import Figure, Point


class PointError(RuntimeError):
    """A point could not be evaluated; the message names the figure and the point."""


class Runner(Protocol):
    def run(self, p: Point) -> dict[str, Any]: ...


class Cache(Protocol):
    def get(self, p: Point) -> dict[str, Any] | None: ...

    def put(self, p: Point, result: dict[str, Any]) -> None: ...


def run_points(
    figs: list[Figure], runner: Runner, cache: Cache,
    on_start: Callable[[Figure, Point], None] | None = None,
    on_done: Callable[[Figure, Point], None] | None = None,
) -> tuple[dict[int, list[dict[str, Any]]], int]:
    """The results per figure (each ``{"point": ..., **result}``) and how many came from the cache."""
    results: dict[int, list[dict[str, Any]]] = {f.figure: [] for f in figs}
    cached = 0
    for f in figs:
        for p in f.points:
            if on_start:
                on_start(f, p)
            res = cache.get(p)
            if res is None:
                try:
                    res = runner.run(p)
                except (ValueError, RuntimeError) as e:
                    raise PointError(f"figure {f.figure}, {p.key()}: {e}") from None
                cache.put(p, res)
                res = {"point": p.to_dict(), **res}
            else:
                cached += 1
            results[f.figure].append(res)
            if on_done:
                on_done(f, p)
    return results, cached
