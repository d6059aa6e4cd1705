"""``hipress bench ...``: performance measurements, medians and ratios taken side by side."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from hipress_cli.options import (
    MAX_REPEAT,
    CompllDirOpt,
    JsonOpt,
    all_or,
    check_kernel_threads,
    console,
    fail,
    out_of_memory,
    parse_fp32_size,
    print_json,
    split_option,
    unknown_algorithm,
)

app = typer.Typer(help="Benchmarks: compressors, synchronization, planning and training; medians side by side.",
                  no_args_is_help=True)


@app.command("compress")
def compress(
    alg: Annotated[list[str] | None, typer.Option("--alg", help=(
        "Algorithm spec(s), comma-separated or --alg repeated (tbq:block=256 --alg tbq:block=1024: one "
        "row each), or 'all' (the default)."))] = None,
    size: Annotated[str, typer.Option("--size", help="Gradient size in bytes of fp32 (e.g. 64M).")] = "64M",
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=MAX_REPEAT, help="Measured repetitions.")] = 10,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=MAX_REPEAT, help="Unmeasured warm-up runs.")] = 2,
    threads: Annotated[int, typer.Option("--threads", min=0, help="Kernel threads (0: all cores).")] = 0,
    reference: Annotated[bool, typer.Option(help="Also time the plain-torch reference implementations.")] = True,
    device: Annotated[
        str, typer.Option("--device", help="cpu, cuda (cuda:N) or auto: CUDA when torch sees a GPU.")
    ] = "auto",
    compll_dir: CompllDirOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Encode/decode throughput, ratio and error per algorithm, beside memory copy and plain torch."""
    from hipress.compress import CompressionError, UnknownAlgorithm, available
    from hipress.compress.bench import bench_compress, human_bytes
    from hipress.compress.registry import split_specs

    if compll_dir is not None:  # a user's algorithm measured beside the built-ins, as `run --compll-dir` runs it
        from hipress.train.config import ConfigError, install_compll, read_compll_dir

        try:  # run's own recipe (make_config's), so --alg names the class a run would train with, and its words
            install_compll(read_compll_dir(compll_dir), source=compll_dir)
        except ConfigError as e:
            raise fail(str(e)) from None

    # every --alg given, in order: a repeated option kept only its last, so `--alg tbq:block=256 --alg
    # tbq:block=1024` measured one of the two without a word
    given = alg if alg else ["all"]
    text = ",".join(given)
    specs = [s for a in given for s in split_option("--alg", a, split_specs)]
    names = all_or("--alg", text, specs, available(), "algorithm")
    if not names:  # an empty table with exit 0 reads as "measured, nothing to report"
        raise fail(f"--alg {text!r} names no algorithm: give one or more of {', '.join(available())} "
                   "(comma-separated), or all")
    nbytes = parse_fp32_size(size)
    check_kernel_threads(threads)
    try:
        result = bench_compress(
            names, nbytes, repeat=repeat, warmup=warmup, threads=threads, reference=reference, device=device
        )
    except UnknownAlgorithm as e:
        raise unknown_algorithm(e, compll_dir) from None
    except (ValueError, CompressionError) as e:
        raise fail(str(e)) from None
    except (MemoryError, RuntimeError) as e:
        raise out_of_memory(e, size, nbytes) from None
    if json_:
        print_json(result)
        return
    mc = result["memcpy_gbps"]
    where = result["device_name"] if result["device"] != "cpu" else f"{result['threads']} threads"
    t = Table(title=f"compressors on {human_bytes(result['size_bytes'])} fp32, {where}; "
              f"{'device copy' if result['device'] != 'cpu' else 'memcpy'} {mc:.2f} GB/s (median of {repeat})")
    for col in ("alg", "encode GB/s", "x memcpy", "decode GB/s", "x memcpy", "decode+add GB/s", "ratio",
                "rel L2 err", "ref enc GB/s", "ref dec GB/s", "speedup enc"):
        t.add_column(col, justify="right" if col != "alg" else "left",
                     # whole specs, at 80 columns too (as plan --explain's gradient names): tbq:block=256 and
                     # tbq:block=1024 were both cut to 'tbq…'; the number columns give way
                     **({"no_wrap": True, "min_width": max(len(r["alg"]) for r in result["algorithms"])}
                        if col == "alg" else {}))
    for r in result["algorithms"]:
        ref_e, ref_d = r.get("reference_encode_gbps"), r.get("reference_decode_gbps")
        t.add_row(
            r["alg"],
            f"{r['encode_gbps']:.2f}",
            f"{r.get('encode_x_memcpy', r['encode_gbps'] / mc):.2f}",
            f"{r['decode_gbps']:.2f}",
            f"{r.get('decode_x_memcpy', r['decode_gbps'] / mc):.2f}",
            f"{r['decode_add_gbps']:.2f}" if "decode_add_gbps" in r else "-",
            f"{r['ratio']:.4f}",
            f"{r['rel_l2_error']:.3f}",
            f"{ref_e:.3f}" if ref_e else "-",
            f"{ref_d:.3f}" if ref_d else "-",
            f"{r['encode_gbps'] / ref_e:.1f}x" if ref_e else "-",
        )
    console.print(t)
    console.print("GB/s = input fp32 bytes / median time; x memcpy = median of paired ratios to a memory copy timed "
                  "just before each repetition; 95% CIs of the medians are in --json.")
    for r in result["algorithms"]:
        if r.get("measured") == "steady":
            w = r["warmup_payload_bytes"]
            console.print(f"{r['alg']}: measured past its warm-up (ratio {r['ratio']:.4f}, what a run sends "
                          f"once it is over); during the warm-up a payload is up to {human_bytes(w)} "
                          f"(ratio {w / result['size_bytes']:.4f}).")
