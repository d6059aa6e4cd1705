"""Spec text -> generated modules: the generator's entry points.

``compile_spec`` parses and checks; ``generate_cpu`` / ``generate_cuda`` give a body module (kernels
and drivers), ``generate_wrapper`` the ``Compressor`` subclass around them. Generated text is
deterministic (same spec, same generator version: same bytes), so it can be committed and checked
for staleness, and numba's on-disk cache keeps working across runs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import jinja2

from . import types as T
from .checker import check
from .errors import CompLLError
from .limits import deep, deep_generation
from .lower import lower
from .names import check_name, doc_text, spec_name
from .parser import parse
from .sizes import StaticContext, StaticSizes
from .symbols import CheckedSpec

VERSION = "0.1"
TEMPLATES = Path(__file__).with_name("templates")

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
    autoescape=False,
)
_env.filters["doc"] = doc_text  # file names in docstrings and comments: escaped data, never code


def render(template: str, **values) -> str:
    """A generated module from one of ``templates/`` (the only way generated files are written)."""
    return _env.get_template(template).render(**values)


def compile_spec(source: str, file: str = "<spec>") -> CheckedSpec:
    """Parse and check a spec; raises ``CompLLError`` on any problem."""
    with deep(file):
        return check(parse(source, file))


def digest(checked: CheckedSpec) -> str:
    return hashlib.sha256((VERSION + "\0" + checked.spec.source).encode()).hexdigest()[:16]


def header_bytes(checked: CheckedSpec) -> int:
    """Bytes of the extra header: the scalars before the first vector of the encoder's concat (of the
    decoder's extract, for a decoder alone)."""
    if checked.encode is not None:
        assert checked.encode.concat is not None
        args = checked.encode.concat.value.args  # type: ignore[attr-defined]
    else:
        assert checked.decode is not None and checked.decode.extract is not None
        args = checked.decode.extract.expr.args[1:]  # type: ignore[attr-defined]
    total = 0
    for a in args:
        if a.ty.is_vec:
            break
        total += T.SIZES[a.ty.kind]
    return total


def _plans(checked: CheckedSpec):
    out = []
    for info in (checked.encode, checked.decode):
        if info is not None:
            out.append(lower(checked, info, {}))
    return out


def naming(checked: CheckedSpec, name: str | None) -> tuple[str, tuple[str, ...]]:
    """The algorithm name a generated file carries, and the ``--name`` arguments that regenerate it.

    ``--name`` names the files, so each file generated with it (body modules, CUDA source, wrapper)
    must say that name and give the command that writes it again under that name, not the name the
    spec's file would give.
    """
    if not name:
        return checked.name, ()
    name = check_name(name)
    try:
        own = checked.name
    except CompLLError:  # a file whose name cannot name an algorithm (``class.pse``): --name is the way
        own = None
    return name, () if name == own else ("--name", name)


@deep_generation
def generate_cpu(checked: CheckedSpec, name: str | None = None) -> str:
    """The numba body module of a spec (``name``: the ``--name`` it is generated under)."""
    from .driver import Driver
    from .gen_cpu import NumbaBackend

    lambdas: list[str] = []
    kernels: list[str] = []
    drivers: list[str] = []
    for plan in _plans(checked):
        prefix = "e" if plan.info.role == "encode" else "d"
        backend = NumbaBackend(checked, plan, prefix)
        drivers.append(Driver(checked, plan, backend).function())
        drivers += [code for code in [Driver(checked, plan, backend).sent_index()] if code]
        lambdas += backend.table.code
        kernels += backend.kernels
    name, name_args = naming(checked, name)
    return render(
        "cpu_module.py.j2",
        name=name,
        spec_files=checked.file_names,
        name_args=name_args,
        version=VERSION,
        digest=digest(checked),
        encode_name=checked.encode.node.name if checked.encode else "",
        decode_name=checked.decode.node.name if checked.decode else "",
        header_bytes=header_bytes(checked),
        lambdas=lambdas,
        kernels=kernels,
        drivers=drivers,
    )


__all__ = ["CompLLError", "compile_spec", "generate_cpu", "spec_name", "VERSION"]


# ---------------------------------------------------------------------------- wrapper
BUILTIN_WIRE_IDS = {"onebit": 3, "tbq": 4, "terngrad": 5, "dgc": 6, "graddrop": 7}
USER_WIRE_IDS = range(128, 250)


def wire_id_for(name: str) -> int:
    """A stable wire id: the library's for the built-ins, a hash of the name for user specs."""
    if name in BUILTIN_WIRE_IDS:
        return BUILTIN_WIRE_IDS[name]
    import zlib

    return USER_WIRE_IDS.start + zlib.crc32(name.encode()) % len(USER_WIRE_IDS)


def class_name(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("_") if p) + "CompLL"


def _doc(checked: CheckedSpec) -> str:
    lines = []
    for line in checked.spec.source.splitlines():
        s = line.strip()
        if not s.startswith("//"):
            break
        lines.append(s[2:].strip())
    text = " ".join(x for x in lines if x) or f"Generated from {' and '.join(map(doc_text, checked.file_names))}."
    text = "".join(c for c in text if c.isprintable()).replace("\\", "/").replace('"""', "'''")
    return text if not text.endswith('"') else text + " "


def _py_kind(kind: str) -> str:
    return {"float": "float", "double": "float", "bool": "bool"}.get(kind, "int")


@deep_generation
def generate_wrapper(
    checked: CheckedSpec, name: str | None = None, wire_id: int | None = None, register: bool = False
) -> str:
    """The ``GeneratedCompressor`` subclass of a spec (``-w``), registering itself with ``-r``."""
    from .emit import ExprEmitter, PyDialect

    encode, _ = checked.require_both("a wrapper (-w, -r)")
    name, name_args = naming(checked, name)
    wire = wire_id if wire_id is not None else wire_id_for(name)
    plan = lower(checked, encode, {})
    from .ir import SConcat

    concat = next(st for st in _walk_steps(plan.steps) if isinstance(st, SConcat))
    sizes = StaticSizes(checked, plan)
    terms = []
    exact = True
    sparse = False  # a vector whose length the data decide: the payload's size depends on the data
    unbounded = False  # one with no bound but the gradient's length (a filter without a limit)
    for f in concat.fields:
        if f.in_header:
            continue
        if f.vec is None:
            terms.append(str(T.SIZES[f.ty.kind]))
            continue
        length, known = sizes.length(f.vec)
        sparse = sparse or not known
        exact = exact and known
        unbounded = unbounded or length is None
        bits = f.ty.elem.elem_bits()  # type: ignore[union-attr]
        if isinstance(bits, str):
            expr, _dep = encode.widths[bits]
            code = sizes.expr(expr, T.INT)
            bits = f"H.width({code})" if code is not None else "8"
            exact = exact and code is not None
        terms.append(f"H.nbytes({length or 'numel'}, {bits})")
    params = []
    for p in checked.params:
        default = p.default
        params.append(
            {
                "name": p.name,
                "kind": p.ty.kind,
                "required": not (default is not None),
                "default": repr(default),
                "pytype": _py_kind(p.ty.kind),
                "pydefault": repr(default) if default is not None else "None",
            }
        )
    requires = []
    for _blk, req in checked.param_requires:
        em = ExprEmitter(PyDialect("H."), StaticContext(), checked.file)  # type: ignore[arg-type]
        requires.append((em.truthy(req.cond), req.message))
    size_doc = (
        "Exact payload bytes for numel elements."
        if exact
        else "An upper bound: data-dependent vectors counted at numel elements."
        if unbounded
        else "An upper bound: data-dependent vectors counted at their bound (a filter's limit, an if's .size test)."
    )
    return render(
        "wrapper.py.j2",
        name=name,
        cls=class_name(name),
        spec_files=checked.file_names,
        name_args=name_args,
        version=VERSION,
        digest=digest(checked),
        register=register,
        wire_id=wire,
        doc=_doc(checked),
        uses_state=bool(encode.states) or encode.uses_random,
        sparse=sparse,
        stochastic=encode.uses_random,
        checks_finite=encode.checks_finite,
        params=params,
        states=[s.name for s in encode.states],
        bodies={"cpu": f"{name}_cpu", "cuda": f"{name}_cupy"},
        header_bytes=header_bytes(checked),
        requires=requires,
        size_terms=terms,
        size_doc=size_doc,
    )


def _walk_steps(steps):
    from .ir import SIf

    for st in steps:
        yield st
        if isinstance(st, SIf):
            yield from _walk_steps(st.then)
            yield from _walk_steps(st.other)
