"""``hipress compll ...``: the CompLL generator (gen, check), its productivity (stats), its speed (bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hipress_cli.options import (
    MAX_REPEAT,
    JsonOpt,
    all_or,
    check_kernel_threads,
    console,
    err_console,
    fail,
    out_of_memory,
    parse_fp32_size,
    path_option,
    print_json,
    split_option,
    styled,
)

app = typer.Typer(
    help="CompLL: compression algorithms written in a DSL, compiled to CPU and GPU code.", no_args_is_help=True
)

FLAVORS = ("cpu", "cupy")


@app.command("gen")
def gen(
    specs: Annotated[
        list[Path],
        typer.Argument(
            help="The .pse spec file; or HiPress's pair XEncode.pse XDecode.pse, generated as one compressor.",
            show_default=False,
            parser=path_option,
        ),
    ],
    body: Annotated[
        bool, typer.Option("-b", "--body", help="Kernels and drivers (the default if no flag is given).")
    ] = False,
    wrapper: Annotated[bool, typer.Option("-w", "--wrapper", help="The Compressor subclass around them.")] = False,
    register: Annotated[
        bool, typer.Option("-r", "--register", help="The wrapper registers itself under the spec's name.")
    ] = False,
    flavor: Annotated[str, typer.Option("-f", "--flavor", help="cpu (numba) or cupy (CUDA C via CuPy).")] = "cpu",
    out: Annotated[Path, typer.Option("-o", "--out", parser=path_option, help="Output directory.")] = Path("."),
    name: Annotated[str | None, typer.Option("--name", help="Algorithm name (default: the spec's file name).")] = None,
    ptx: Annotated[bool, typer.Option("--ptx", help="With -f cupy: also compile the CUDA with nvcc -ptx.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Generate code from a spec: hipress compll gen SPEC.pse [DECODE.pse] [-b] [-w] [-r] -f cpu|cupy [-o DIR].

    As in HiPress, XDecode.pse -b generates a decoder alone and XEncode.pse -b an encoder alone; a wrapper (-w/-r)
    needs both: one spec holding both functions, or the two files.
    """  # the help of `compll gen --help`, so plain text: no ``literal`` markup
    from hipress.compll import CompLLError
    from hipress.compll.loader import read_specs, write_modules
    from hipress.compll.names import check_name

    if flavor not in FLAVORS:
        raise fail(f"--flavor must be one of {', '.join(FLAVORS)}, got {flavor!r}")
    if not (body or wrapper or register):
        body = True
    if ptx and (flavor != "cupy" or not body):
        # else nothing is compiled and no .ptx written, though the user asked for one
        raise fail("--ptx compiles the generated CUDA kernels: give it with -f cupy and the body (-b, the default)")
    if out.exists() and not out.is_dir():  # mkdir's own error, 'File exists', read as a refused overwrite
        raise fail(f"-o {out} is a file, not a directory: give the directory to generate into, e.g. -o generated")
    if name is not None:  # '' (a variable left unset) is refused, not read as "the file's name"
        try:
            check_name(name)
        except CompLLError as e:
            raise fail(f"{e.message} (hint: {e.hint})") from None
    try:
        checked = read_specs(list(specs))
        paths = write_modules(
            checked, out, body=body, wrapper=wrapper, register=register, flavors=(flavor,), name=name
        )
    except CompLLError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot write to {out}: {e.strerror or e}") from None
    ptx_files = []
    if ptx:
        ptx_files = _nvcc_ptx([p for p in paths if p.suffix == ".cu"])
    if json_:
        print_json({"spec": " ".join(str(s) for s in specs), "files": [str(p) for p in paths + ptx_files]})
        return
    for p in paths + ptx_files:
        console.print(f"wrote {p} ({sum(1 for _ in p.open())} lines)")


def _nvcc_ptx(sources: list[Path]) -> list[Path]:
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise fail("--ptx: nvcc is not on PATH")
    out = []
    for src in sources:
        ptx = src.with_suffix(".ptx")
        r = subprocess.run(
            [nvcc, "-ptx", "-arch=sm_90", "-fmad=false", "--std=c++14", "-o", str(ptx), str(src)],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            raise fail(f"nvcc failed on {src}:\n{r.stderr.strip()}")
        out.append(ptx)
    return out


@app.command("check")
def check(
    specs: Annotated[list[Path], typer.Argument(help="Spec files to parse and type-check.", show_default=False,
                                                parser=path_option)],
    json_: JsonOpt = False,
) -> None:
    """Parse and check specs; report each problem as file:line:col (exit 1 if any spec has one)."""
    rows = [_check_one(s) for s in specs]
    if json_:
        print_json({"ok": all(r["ok"] for r in rows), "specs": rows})
    else:
        for r in rows:
            if r["ok"]:
                params = ", ".join(p["name"] for p in r["parameters"]) or "none"
                console.print(f"{r['spec']}: ok ({r['roles']}; parameters: {params})")
            else:
                err_console.print(styled("[bold red]error:[/] {}", r["error"]["text"]), soft_wrap=True)
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)


def _check_one(spec: Path) -> dict:
    """One spec's verdict as JSON-ready data: what ``check`` prints, or ``--json`` gives as is.

    An error keeps its parts (file, line, col, message, hint) so that an editor or CI step can point
    at the place without parsing the text.
    """
    from hipress.compll import CompLLError
    from hipress.compll.loader import read_spec

    try:
        _, checked = read_spec(spec)
    except CompLLError as e:
        error = {"file": e.file, "line": e.line, "col": e.col, "message": e.message, "hint": e.hint, "text": str(e)}
        return {"spec": str(spec), "ok": False, "error": error}
    params = [
        {"name": p.name, "type": str(p.ty), "required": p.required, "default": p.default} for p in checked.params
    ]
    return {"spec": str(spec), "ok": True, "roles": checked.roles, "parameters": params}


@app.command("stats")
def stats(
    specs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Spec files to count (HiPress's XEncode.pse XDecode.pse count as one compressor); "
            "none: the built-ins against their hand-written code.",
            show_default=False,
            parser=path_option,
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Lines of DSL against lines generated and lines hand-written, per built-in algorithm, or per spec given."""
    from hipress.compll.stats import builtin_stats

    if specs:
        _spec_stats(specs, json_)
        return
    rows = builtin_stats()
    if json_:
        print_json({"algorithms": rows, "counting": "non-blank lines that are not comments or docstrings"})
        return
    t = Table(title="CompLL productivity: lines of code per algorithm")
    for col in ("alg", "DSL", "gen CPU", "gen CUDA C", "gen CUDA py", "wrapper", "hand-written", "hand / DSL"):
        t.add_column(col, justify="right" if col != "alg" else "left")
    for r in rows:
        t.add_row(
            r["alg"],
            str(r["dsl"]),
            str(r["generated_cpu"]),
            str(r["generated_cuda_c"]),
            str(r["generated_cuda_py"]),
            str(r["generated_wrapper"]),
            str(r["handwritten"]),
            f"{r['handwritten'] / r['dsl']:.1f}x",
        )
    console.print(t)
    console.print(
        "Lines: non-blank, not comments or docstrings. Hand-written: the algorithm's file, the kernel "
        "functions its path reaches in compress/kernels/ and, for dgc/graddrop, compress/sparse.py "
        "(shared code counted for each algorithm that uses it; no hand-written CUDA exists). "
        "Generated CUDA C includes the 55-line prelude of CompLL's semantics."
    )


def _spec_stats(specs: list[Path], json_: bool) -> None:
    """``compll stats SPEC...``: each compressor the files make (``loader.group_files``), generated in memory."""
    from hipress.compll import CompLLError
    from hipress.compll.loader import group_files
    from hipress.compll.stats import spec_stats

    try:
        rows = [spec_stats(group) for group in group_files(list(specs))]
    except CompLLError as e:
        raise fail(str(e)) from None
    if json_:
        print_json({"specs": rows, "counting": "non-blank lines that are not comments or docstrings"})
        return
    t = Table(title="CompLL: lines of DSL against lines generated")
    for col in ("spec", "alg"):  # names fold rather than end in an ellipsis: they are what the user looks up
        t.add_column(col, overflow="fold")
    for col in ("DSL", "gen CPU", "gen CUDA C", "gen CUDA py", "wrapper", "gen CPU / DSL"):
        t.add_column(col, justify="right")
    for r in rows:
        wrapper = "-" if r["generated_wrapper"] is None else str(r["generated_wrapper"])
        ratio = f"{r['generated_cpu'] / r['dsl']:.1f}x" if r["dsl"] else "-"
        counts = (r["dsl"], r["generated_cpu"], r["generated_cuda_c"], r["generated_cuda_py"])
        t.add_row(" + ".join(Path(f).name for f in r["files"]), r["alg"], *map(str, counts), wrapper, ratio)
    console.print(t)
    console.print("Lines: non-blank, not comments or docstrings. wrapper '-': the spec is an encoder or a decoder "
                  "alone (a wrapper needs both: pair XEncode.pse with XDecode.pse).")


@app.command("bench")
def bench(
    alg: Annotated[str, typer.Option("--alg", help="Built-ins to compare, comma-separated, or 'all'.")] = "all",
    size: Annotated[str, typer.Option("--size", help="Gradient size in bytes of fp32 (e.g. 64M).")] = "64M",
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=MAX_REPEAT,
        help="Measured repetitions (interleaved).")] = 10,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=MAX_REPEAT, help="Unmeasured warm-up runs.")] = 2,
    threads: Annotated[int, typer.Option("--threads", min=0, help="Kernel threads (0: all cores).")] = 0,
    json_: JsonOpt = False,
) -> None:
    """Generated against hand-written compressors, side by side in one run (interleaved repetitions)."""
    from hipress.compll.bench import bench_builtins
    from hipress.compll.builtins import BUILTINS
    from hipress.compress.bench import human_bytes

    names = all_or("--alg", alg, split_option("--alg", alg), list(BUILTINS), "built-in")
    if not names:
        raise fail(f"--alg names no built-in; give some of {', '.join(BUILTINS)} (comma-separated) or 'all'")
    unknown = [n for n in names if n not in BUILTINS]
    if unknown:
        raise fail(_unknown_builtins(unknown, list(BUILTINS)))
    nbytes = parse_fp32_size(size)  # the same sizes as bench compress and sync
    check_kernel_threads(threads)
    try:
        result = bench_builtins(names, nbytes, repeat=repeat, warmup=warmup, threads=threads)
    except (MemoryError, RuntimeError) as e:
        raise out_of_memory(e, size, nbytes) from None
    if json_:
        print_json(result)
        return
    t = Table(
        title=f"generated vs hand-written on {human_bytes(result['size_bytes'])} fp32, "
        f"{result['threads']} threads (median of {repeat}, interleaved)"
    )
    for col in (
        "alg",
        "lib enc GB/s",
        "gen enc GB/s",
        "enc gen/lib",
        "lib dec GB/s",
        "gen dec GB/s",
        "dec gen/lib",
        "same bytes",
    ):
        t.add_column(col, justify="right" if col != "alg" else "left")
    for r in result["algorithms"]:
        t.add_row(
            r["alg"],
            f"{r['lib_encode_gbps']:.2f}",
            f"{r['gen_encode_gbps']:.2f}",
            f"{r['encode_ratio']:.2f} [{r['encode_ratio_ci95'][0]:.2f}, {r['encode_ratio_ci95'][1]:.2f}]",
            f"{r['lib_decode_gbps']:.2f}",
            f"{r['gen_decode_gbps']:.2f}",
            f"{r['decode_ratio']:.2f} [{r['decode_ratio_ci95'][0]:.2f}, {r['decode_ratio_ci95'][1]:.2f}]",
            "yes" if r["same_payload"] else "NO",
        )
    console.print(t)
    console.print("gen/lib > 1: the generated code is faster; [lo, hi]: bootstrap 95% CI of the ratio of medians.")


def _unknown_builtins(unknown: list[str], builtins: list[str]) -> str:
    """The refusal of ``compll bench --alg`` names outside the five CompLL built-ins: a typo gets its
    near miss (as ``bench compress --alg tbqq`` does), and a library algorithm that has no CompLL spec
    (signsgd, topk) is pointed to ``bench compress``, which times it; the bare list left both guessing."""
    from hipress.compress.registry import available
    from hipress.suggest import SAME_BUT_FOR_CASE_ELSE_CLOSE, suggestion

    library = set(available())
    notes = []
    for name in unknown:
        meant = suggestion(name, builtins, SAME_BUT_FOR_CASE_ELSE_CLOSE)
        if meant is not None:
            notes.append(f"{name!r} (did you mean {meant!r}?)")
        elif name in library:
            notes.append(f"{name!r} (a library algorithm without a CompLL spec: time it with "
                         f"`hipress bench compress --alg {name}`)")
        else:
            notes.append(repr(name))
    return f"unknown built-in(s) {', '.join(notes)}; compll bench compares the CompLL built-ins: {', '.join(builtins)}"
