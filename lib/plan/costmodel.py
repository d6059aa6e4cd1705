"""Cost of each synchronization primitive as a function of the fp32 elements it handles.

HiPress's model, kept as is so that its published constants mean what they meant there: a primitive
costs ``overhead`` ms while ``x < max(0, (overhead - A) / B)`` and ``B*x + A`` ms above. The
CaSync formulas (``secopa``) evaluate it as ``max(overhead, A + B*x)``: the same numbers except when
B = 0 and overhead > A (HiPress then charges A) and, by rounding, right at the threshold; HiPress's
own planner (``secopa_sosp21``) evaluates HiPress's expression literally. ``x`` counts fp32
elements; for a payload, its bytes / 4.

Primitives (names as in hipress; HiPress's own names accepted when loading):

=========  ======================  ====================================================================
encode                             compress x elements
decode                             decompress x elements into an accumulator (decode(add=True): what
                                   a receiver runs, so it is also the merge of compressed data)
merge      aggregate               add x fp32 elements into an accumulator (uncompressed aggregation)
send       ring_send_one_step      one ring step: every node sends x elements to its successor while
                                   receiving x from its predecessor
gather     (per node count N)      N-1 nodes each send x elements to one node (co-located PS push)
broadcast  (per node count N)      one node sends x elements to each of N-1 nodes (PS pull)
=========  ======================  ====================================================================

Gather and broadcast are measured for particular node counts. For any other N:

- a profile (``planner="casync"``) derives them from the link's latency and bandwidth, i.e. from
  ``send``: ``gather_N(x) = max(o, A + (N-1)*B*x)`` -- the receiving link carries (N-1)*x elements
  while the N-1 messages' latencies overlap. (On HiPress's constants this underestimates the measured
  A, e.g. 0.20 against 0.42 ms at N=4, and matches B within 6%; it is a fallback, and ``hipress
  profile`` measures the node count you run.)
- HiPress's constants (``planner="hipress"``: ``sosp21``, measured at N = 4, 8, 16 only) are
  interpolated linearly in N, each of B, A and overhead, between the two nearest measured node
  counts, and extrapolated from the two nearest outside them (N = 2, 3 from 4 and 8; N > 16 from 8
  and 16). HiPress's planner has no constants there at all; ``collective_origin`` says which was used
  so that ``hipress plan`` can tell the user. With one node nothing travels: cost 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hipress.files import NotUtf8, TooLarge, decode_text, read_at_most

from .errors import PlanError
from .limits import MAX_A_MS, MAX_B_MS, MAX_NODES

COMPUTE = ("encode", "decode", "merge")
ALIASES = {"aggregate": "merge", "ring_send_one_step": "send"}
PROFILE_FORMAT = "hipress-profile"
#: The profile layout this code writes and the newest it reads (HiPress's own objects carry neither).
PROFILE_VERSION = 1
#: Which formulas a cost model is meant for: "hipress" = HiPress's own SeCoPa planner
#: (``secopa_sosp21``, HiPress's constants), "casync" = hipress's pipeline formulas (``secopa``, profiles).
PLANNERS = ("hipress", "casync")
HIPRESS_RATIO = 1 / 16  # HiPress's planner assumes every compressed gradient shrinks 16x
#: A gather/broadcast key: ASCII digits only (``str.isdigit`` takes '²', which ``int`` refuses), and
#: few enough that ``int`` never meets its 4300-digit limit.
_NODE_KEY = re.compile(rf"[0-9]{{1,{len(str(MAX_NODES))}}}")


@dataclass(frozen=True)
class Linear:
    """``max(overhead, A + B*x)`` ms for x fp32 elements; plus how well it was fitted, if it was."""

    B: float
    A: float
    overhead: float = 0.0
    fit: Mapping[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # A may be negative (a line that starts where it crosses the floor); the cost never is
        for k in ("B", "A", "overhead"):
            v = getattr(self, k)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or (v < 0 and k != "A"):
                raise PlanError(f"cost constant {k}={v!r} must be a finite number" + (" >= 0" if k != "A" else ""))

    def __call__(self, x: float) -> float:
        """Scalar cost (the brute-force checker's path)."""
        return max(self.overhead, self.A + self.B * x)

    def vec(self, x: np.ndarray) -> np.ndarray:
        """Vectorized cost; the same arithmetic, element by element, as ``__call__``."""
        return np.maximum(self.overhead, self.A + self.B * x)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"B": self.B, "A": self.A, "overhead": self.overhead}
        if self.fit:
            d["fit"] = dict(self.fit)
        return d

    @classmethod
    def from_json(cls, d: Any, where: str) -> Linear:
        if not isinstance(d, Mapping):
            raise PlanError(f"{where}: expected an object with B, A, overhead, got {type(d).__name__}")
        try:
            vals = {k: d[k] for k in ("B", "A")}
        except KeyError as e:
            raise PlanError(f"{where}: missing constant {e.args[0]!r} (need B, A and optionally overhead)") from None
        vals["overhead"] = d.get("overhead", 0.0)
        for k, v in vals.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise PlanError(f"{where}.{k}: expected a number, got {v!r}")
            _check_bound(v, k, where)
        try:
            return cls(float(vals["B"]), float(vals["A"]), float(vals["overhead"]), d.get("fit"))
        except PlanError as e:
            raise PlanError(f"{where}: {e}") from None


ZERO = Linear(0.0, 0.0, 0.0)

#: The largest magnitude a loaded constant may have, and its unit (see ``limits``).
_BOUNDS = {"B": (MAX_B_MS, "ms per element (1 s)"), "A": (MAX_A_MS, "ms (an hour)"),
           "overhead": (MAX_A_MS, "ms (an hour)")}


def _check_bound(v: float, k: str, where: str) -> None:
    """Refuse a loaded constant that is not finite or beyond what any machine measures.

    Checked where a file is read rather than in ``Linear`` itself: the planner builds curves too (a
    gather at N derived from ``send`` scales B by N-1), and those may exceed a per-call bound
    legitimately. ``v`` may be a JSON integer too large for a float, so it is compared, not converted.
    """
    bound, unit = _BOUNDS[k]
    if isinstance(v, float) and not math.isfinite(v):
        raise PlanError(f"{where}.{k}: {v!r} is not a finite number; fix the file or measure the cluster again "
                        "with `hipress profile`")
    if abs(v) > bound:
        shown = f"{v:g}" if isinstance(v, float) else (str(v) if len(str(v)) <= 30 else f"{str(v)[:20]}...")
        raise PlanError(f"{where}.{k}: {shown} is beyond the largest cost constant taken, {bound:g} {unit}; "
                        "is it in the wrong unit (ms, per fp32 element)? Fix the file or measure the cluster "
                        "again with `hipress profile`")


@dataclass(frozen=True)
class CostModel:
    """The six primitives of a cluster, and the compression ratio it was made with (if fixed).

    ``ratio`` is HiPress's fixed payload/fp32 ratio (1/16 in ``sosp21``); ``None`` when the ratio
    should come from the algorithm the plan is made for. ``alg`` names the compressor whose
    encode/decode were measured (a profile), ``None`` for the published constants. ``planner`` names
    the formulas that decide with these constants (see ``PLANNERS``): HiPress's constants mean what
    they meant in HiPress's planner, a profile what it measured for hipress's engine.
    """

    encode: Linear
    decode: Linear
    merge: Linear
    send: Linear
    gather: Mapping[int, Linear]
    broadcast: Mapping[int, Linear]
    ratio: float | None = None
    alg: str | None = None
    name: str = field(default="custom", compare=False)
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)
    planner: str = "casync"

    def __post_init__(self) -> None:
        if self.planner not in PLANNERS:
            raise PlanError(f"cost model {self.name!r}: planner {self.planner!r} is not one of {', '.join(PLANNERS)}")

    def collective(self, kind: str, nnodes: int) -> Linear:
        """Gather or broadcast at ``nnodes``: fitted constants if there are some, else see ``collective_origin``."""
        if nnodes < 1:
            raise PlanError(f"the number of nodes must be >= 1, got {nnodes}")
        if nnodes == 1:
            return ZERO
        table = self.gather if kind == "gather" else self.broadcast
        if nnodes in table:
            return table[nnodes]
        pair = self._neighbours(table, nnodes)
        if pair is not None:
            (n0, c0), (n1, c1) = pair
            t = (nnodes - n0) / (n1 - n0)
            vals = {k: getattr(c0, k) + t * (getattr(c1, k) - getattr(c0, k)) for k in ("B", "A", "overhead")}
            if vals["B"] < 0 or vals["overhead"] < 0:
                raise PlanError(f"cost model {self.name!r}: {kind} at N={nnodes}, extrapolated from N={n0} and "
                                f"N={n1}, has a negative constant; give {kind} constants for N={nnodes}")
            return Linear(vals["B"], vals["A"], vals["overhead"])
        s = self.send
        return Linear(s.B * (nnodes - 1), s.A, s.overhead)

    def _neighbours(self, table: Mapping[int, Linear], nnodes: int) -> tuple | None:
        """For HiPress's constants, the two measured node counts to interpolate (or extrapolate) from."""
        if self.planner != "hipress" or len(table) < 2:
            return None
        ns = sorted(table)
        lo = max([n for n in ns if n < nnodes], default=None)
        hi = min([n for n in ns if n > nnodes], default=None)
        if lo is None:
            lo, hi = ns[0], ns[1]
        elif hi is None:
            lo, hi = ns[-2], ns[-1]
        return (lo, table[lo]), (hi, table[hi])

    def collective_origin(self, kind: str, nnodes: int) -> str:
        """Where ``collective(kind, nnodes)`` comes from, in words (for ``hipress plan``)."""
        table = self.gather if kind == "gather" else self.broadcast
        if nnodes <= 1:
            return "none: one node sends nothing"
        if nnodes in table:
            return f"measured at N={nnodes}"
        pair = self._neighbours(table, nnodes)
        if pair is not None:
            (n0, _), (n1, _) = pair
            how = "interpolated" if n0 < nnodes < n1 else "extrapolated"
            return f"{how} linearly in N from the constants measured at N={n0} and N={n1}"
        return "derived from the send latency and bandwidth"

    def fitted_nodes(self, kind: str) -> list[int]:
        return sorted(self.gather if kind == "gather" else self.broadcast)

    # ---------------------------------------------------------------- (de)serialization
    def to_json(self) -> dict:
        d: dict[str, Any] = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "name": self.name}
        if self.alg is not None:
            d["alg"] = self.alg
        if self.ratio is not None:
            d["ratio"] = self.ratio
        for k in ("encode", "decode", "merge", "send"):
            d[k] = getattr(self, k).to_json()
        d["gather"] = {str(n): v.to_json() for n, v in sorted(self.gather.items())}
        d["broadcast"] = {str(n): v.to_json() for n, v in sorted(self.broadcast.items())}
        if self.meta:
            d["meta"] = dict(self.meta)
        if self.planner != "casync":
            d["planner"] = self.planner
        return d

    @classmethod
    def from_json(cls, d: Any, source: str = "<profile>") -> CostModel:
        """Read a saved profile or HiPress's ``secopa_cost_model`` object (its key names accepted)."""
        if not isinstance(d, Mapping):
            raise PlanError(f"{source}: a cost model is a JSON object, got {type(d).__name__}")
        fmt, version = d.get("format", PROFILE_FORMAT), d.get("version", PROFILE_VERSION)
        if fmt != PROFILE_FORMAT:  # another tool's JSON that happens to hold the same keys
            raise PlanError(f"{source}: format {str(fmt)[:40]!r} is not a hipress profile ({PROFILE_FORMAT!r}); "
                            f"make one with `hipress profile --output FILE`")
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= PROFILE_VERSION:
            # a newer layout's fields may mean something this code would misread: said, not guessed
            raise PlanError(f"{source}: profile version {str(version)[:20]} is not one this hipress reads "
                            f"(1..{PROFILE_VERSION}); profile again with this hipress, or use the one that wrote it")
        d = {ALIASES.get(k, k): v for k, v in d.items()}
        prims = {}
        for k in ("encode", "decode", "merge", "send"):
            if k not in d:
                raise PlanError(f"{source}: no cost constants for {k!r}: a cost model holds encode, decode, merge "
                                f"and send, each {{\"A\": ms, \"B\": ms per fp32 element}}; write a whole one with "
                                f"`hipress profile --output FILE`, or name a built-in ({', '.join(BUILTIN)})")
            prims[k] = Linear.from_json(d[k], f"{source}: {k}")
        colls: dict[str, dict[int, Linear]] = {}
        for k in ("gather", "broadcast"):
            table = d.get(k, {})
            if not isinstance(table, Mapping):
                raise PlanError(f"{source}: {k} must map node counts to constants, got {type(table).__name__}")
            colls[k] = {}
            for n, v in table.items():
                if not _NODE_KEY.fullmatch(str(n)) or not 2 <= int(n) <= MAX_NODES:
                    shown = str(n) if len(str(n)) <= 40 else f"{str(n)[:20]}...({len(str(n))} characters)"
                    raise PlanError(f"{source}: {k} key {shown!r} is not a node count in 2..{MAX_NODES}")
                colls[k][int(n)] = Linear.from_json(v, f"{source}: {k}[{n}]")
        ratio = d.get("ratio")
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                                  or not 0 < ratio <= 2):
            raise PlanError(f"{source}: ratio {ratio!r} must be a number in (0, 2]")
        alg = d.get("alg")
        if alg is not None and not isinstance(alg, str):
            raise PlanError(f"{source}: alg must be an algorithm spec string, got {alg!r}")
        meta = d.get("meta", {})
        planner = d.get("planner", "casync")
        if planner not in PLANNERS:
            raise PlanError(f"{source}: planner {planner!r} must be one of {', '.join(PLANNERS)}")
        return cls(**prims, gather=colls["gather"], broadcast=colls["broadcast"], ratio=ratio, alg=alg,
                   name=str(d.get("name", source)), meta=meta if isinstance(meta, Mapping) else {},
                   planner=planner)


def sosp21() -> CostModel:
    """HiPress's published constants (fitted on the authors' 56 Gbps RDMA cluster), ratio 1/16, for
    HiPress's own planner (``secopa_sosp21``)."""
    text = resources.files("hipress.plan").joinpath("data/sosp21_cost_model.json").read_text("utf-8")
    d = json.loads(text)
    d["name"] = "sosp21"
    d["planner"] = "hipress"
    return CostModel.from_json(d, "sosp21")


BUILTIN = {"sosp21": sosp21}


#: A profile's most bytes: ``hipress profile`` writes a few kilobytes of fitted constants and samples.
MAX_PROFILE_BYTES = 16 << 20


def load_cost_model(spec: str | Path | CostModel) -> CostModel:
    """``"sosp21"``, a path to a profile JSON written by ``hipress profile``, or a ``CostModel``."""
    if isinstance(spec, CostModel):
        return spec
    if isinstance(spec, str) and spec in BUILTIN:
        return BUILTIN[spec]()
    p = Path(spec)
    if not p.exists():
        raise PlanError(f"cost model {str(spec)!r}: no such file and not a built-in "
                        f"(built-ins: {', '.join(BUILTIN)}); make one with `hipress profile --output FILE`")
    try:
        data = read_at_most(p, MAX_PROFILE_BYTES)
    except OSError as e:
        raise PlanError(f"{p}: cannot read: {e.strerror or e}") from None
    except TooLarge as e:
        raise PlanError(f"{p}: {e}, more than any profile (`hipress profile` writes a few kilobytes): "
                        "give the profile JSON") from None
    try:
        d = json.loads(decode_text(data))  # a byte order mark (a Windows editor's) dropped: it is not JSON
    except NotUtf8 as e:  # by line, as a JSON error is
        raise PlanError(f"{p}:{e.line}: byte {e.byte:#04x} is not UTF-8 text; save the profile as UTF-8") from None
    except json.JSONDecodeError as e:
        raise PlanError(f"{p}:{e.lineno}: not valid JSON: {e.msg} (column {e.colno}); a cost model file is the "
                        "profile JSON that `hipress profile --output FILE` writes") from None
    if isinstance(d, Mapping) and "secopa_cost_model" in d:  # the whole sosp21.json
        d = {"ratio": HIPRESS_RATIO, "planner": "hipress", **d["secopa_cost_model"]}
    return CostModel.from_json(d, str(p))
