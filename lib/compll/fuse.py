"""Loop fusion over the IR: consecutive elementwise loops over the same extent become one loop.

Two loops fuse only if neither reads, at another index, a vector the other writes, and no item uses
a reduction computed in the same loop; scalar host steps in between are deferred past the loop when
they do not depend on it (see ``lower.py`` for why this matters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ast
from . import types as T
from .ir import IPack, IReduce, IStore, SHost, SLoop, Step, TempSym, Vec, walk_expr
from .symbols import Symbol

if TYPE_CHECKING:
    from .lower import Lowerer


def _loop_reads(loop: SLoop, low: Lowerer) -> set[Symbol]:
    out: set[Symbol] = set()
    for it in loop.items:
        v = it.src if isinstance(it, (IReduce, IPack)) else it.value
        out |= _vec_syms(v, low)
        if isinstance(it, IReduce):
            out |= low.expr_syms(it.init)
            for c in it.lam.captures:
                out |= low.sym_closure(c, set())
    return out


def _vec_syms(v: Vec, low: Lowerer) -> set[Symbol]:
    out: set[Symbol] = set()
    if v.sym is not None:
        out |= low.sym_closure(v.sym, set())
    if v.src is not None:
        out |= _vec_syms(v.src, low)
    if v.lam is not None:
        for c in v.lam.captures:
            out |= low.sym_closure(c, set())
    return out


def _loop_writes(loop: SLoop, low: Lowerer) -> set[str]:
    return {it.dst for it in loop.items if isinstance(it, IStore)}


def _name_syms(names: set[str], low: Lowerer) -> set[Symbol]:
    """The symbols whose generated names are ``names`` (``low.names``: id(symbol) -> name)."""
    return {s for s in low.info.symbols if low.names.get(id(s)) in names}


def _items_safe(loop: SLoop, targets: set[Symbol], low: Lowerer) -> bool:
    for it in loop.items:
        v = it.src if isinstance(it, (IReduce, IPack)) else it.value
        if not low.vec_safe(v, targets):
            return False
        if isinstance(it, IReduce) and not low.lam_safe(it.lam, targets, set()):
            return False
    return True


def _host_reads_names(step: SHost, low: Lowerer) -> set[str]:
    out = set()
    for x in walk_expr(step.expr):
        if isinstance(x, ast.Name) and x.sym is not None and id(x.sym) in low.names:
            out.add(low.names[id(x.sym)])
        if isinstance(x, ast.Call) and id(x) in low.hoisted:
            out.add(low.hoisted[id(x)])
    return out


def _host_target(step: SHost, low: Lowerer) -> str:
    t = step.target
    return t.name if isinstance(t, TempSym) else low.names.get(id(t), t.name)


def fuse(steps: list[Step], low: Lowerer) -> list[Step]:
    """Merge consecutive compatible loops; see the module docstring for the rules."""
    out: list[Step] = []
    group: SLoop | None = None
    pending: list[SHost] = []
    for st in steps:
        if isinstance(st, SLoop):
            if group is not None and _can_fuse(group, st, pending, low):
                group.items += st.items
                continue
            if group is not None:
                out.append(group)
                out += pending
            group, pending = st, []
            continue
        if group is not None and isinstance(st, SHost):
            pending.append(st)
            continue
        if group is not None:
            out.append(group)
            out += pending
            group, pending = None, []
        out.append(st)
    if group is not None:
        out.append(group)
        out += pending
    return out


def _can_fuse(g: SLoop, l2: SLoop, pending: list[SHost], low: Lowerer) -> bool:
    if g.key != l2.key or g.key.startswith("?"):
        return False
    # inputs of l2 computed by the group's reductions or by deferred host statements
    produced = {r.temp for r in g.reduces} | {_host_target(p, low) for p in pending}
    l2_inputs = {low.names.get(id(s), s.name) for s in _loop_reads(l2, low)}
    l2_inputs |= {it.temp for it in l2.reduces}  # (fresh, never in produced)
    for it in l2.items:
        if isinstance(it, IReduce):
            l2_inputs |= _host_reads_names(SHost(TempSym("x", T.INT), it.init), low)
    if l2.length in produced or (l2_inputs & produced):
        return False
    for it in l2.items:
        for x in _captured_names(it, low):
            if x in produced:
                return False
    # deferred host statements must not read what l2 writes
    w2 = _loop_writes(l2, low)

    def reduced(e: ast.Expr) -> bool:  # a reduction the group computes: p reads its result, not its vector
        return isinstance(e, ast.Call) and low.hoisted.get(id(e)) in produced

    for p in pending:
        if _host_reads_names(p, low) & w2:
            return False
        if _name_syms(w2, low) & low.expr_syms(p.expr, skip=reduced):
            return False
    # cross reads of written vectors only at the loop index
    w1 = _name_syms(_loop_writes(g, low), low)
    ws2 = _name_syms(w2, low)
    if w1 and not _items_safe(l2, low.dependents(w1), low):
        return False
    if ws2 and not _items_safe(g, low.dependents(ws2), low):
        return False
    # stores into temporaries not tied to symbols: the later loop must not read them
    tmp_w1 = _loop_writes(g, low) - {low.names[id(s)] for s in w1 if id(s) in low.names}
    if tmp_w1 & {_vec_name(it) for it in l2.items}:
        return False
    return True


def _vec_name(it) -> str:
    v = it.src if isinstance(it, (IReduce, IPack)) else it.value
    return v.name


def _captured_names(it, low: Lowerer) -> set[str]:
    out: set[str] = set()
    v = it.src if isinstance(it, (IReduce, IPack)) else it.value
    while v is not None:
        if v.kind == "range":
            out.add(v.length)
        if v.lam is not None:
            for c in v.lam.captures:
                out.add(low.names.get(id(c), c.name))
        v = v.src
    return out
