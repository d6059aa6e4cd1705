"""``hipress reproduce sosp21`` end to end (figure 11: six simulations), resumability, bad input."""

import json

from typer.testing import CliRunner

from hipress_cli.app import build

runner = CliRunner()


def invoke(*args):
    return runner.invoke(build(), list(args))


def test_figure11_json_resumes_from_cache(tmp_path):
    out = tmp_path / "out"
    r = invoke("reproduce", "sosp21", "--figure", "11", "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    steps = report["breakdown_ms"]["vgg19"]
    assert list(steps) == ["default", "on_cpu_compression", "on_gpu_compression", "pipeline", "bulk_sync", "secopa"]
    assert steps["secopa"]["sync_span_ms"] < steps["default"]["sync_span_ms"]
    assert {e["system"].split()[0] for e in report["errors"]} == set(steps)
    assert (out / "fig11.png").stat().st_size > 1000 and (out / "errors.md").exists()
    claims = [c for c in report["findings"] if c["kind"] == "breakdown"]
    assert len(claims) == 5 and all("order_holds" in c for c in claims)
    assert "figure 11 directions kept" in (out / "findings.md").read_text()
    # figure 11 for BERT-base too (issue 17): the same six steps, predicted only
    assert list(report["breakdown_ms"]["bert"]) == list(steps)
    cached = sorted((out / "points").iterdir())
    assert len(cached) == 12
    mtimes = [p.stat().st_mtime_ns for p in cached]
    r2 = invoke("reproduce", "sosp21", "--figure", "11", "--out", str(out), "--json")
    assert r2.exit_code == 0
    assert "already done" in r2.stderr
    assert [p.stat().st_mtime_ns for p in sorted((out / "points").iterdir())] == mtimes
    assert json.loads(r2.stdout)["breakdown_ms"] == report["breakdown_ms"]
    # the terminal's tally is findings.md's, in the same words (it once counted rows where the file counts pairs)
    r3 = invoke("reproduce", "sosp21", "--figure", "11", "--out", str(out))
    assert r3.exit_code == 0
    tally = next(line for line in (out / "findings.md").read_text().splitlines() if "directions kept" in line)
    assert tally in r3.stdout


def test_bad_options(tmp_path):
    r = invoke("reproduce", "sosp21", "--mode", "magic", "--out", str(tmp_path))
    assert r.exit_code == 2 and "--mode must be sim or real" in r.output
    r = invoke("reproduce", "sosp21", "--figure", "9", "--out", str(tmp_path))
    assert r.exit_code == 2 and "no figure 9" in r.output
    r = invoke("reproduce", "sosp21", "--experiments", str(tmp_path / "none"), "--out", str(tmp_path))
    assert r.exit_code == 2 and "does not exist" in r.output
    (tmp_path / "afile").write_text("")
    r = invoke("reproduce", "sosp21", "--experiments", str(tmp_path / "afile"), "--out", str(tmp_path))
    assert r.exit_code == 2 and "afile is not a directory" in " ".join(r.output.split())
    r = invoke("reproduce", "sosp21", "--figure", "11", "--out", str(tmp_path / "afile"))  # said "File exists"
    assert r.exit_code == 2 and "afile is a file, not a directory; give a directory" in " ".join(r.output.split())
    # options that mean nothing where they were given are refused, not ignored
    r = invoke("reproduce", "sosp21", "--validate", "--figure", "99", "--models", "nope", "--out", str(tmp_path))
    assert r.exit_code == 2 and "do not apply to it" in " ".join(r.output.split())
    # given is given, the default's own value included
    for extra in (("--rate", "10gbit"), ("--iters", "3"), ("--hosts", "2"), ("--hosts", "4"), ("--rate", "1gbit")):
        r = invoke("reproduce", "sosp21", "--figure", "11", *extra, "--out", str(tmp_path))
        assert r.exit_code == 2 and f"{extra[0]}: for --mode real" in " ".join(r.output.split()), r.output


def test_an_output_directory_that_takes_no_file_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """An existing --out on a read-only mount passed ``mkdir(exist_ok=True)`` and failed with a traceback at
    its first point; root ignores permission bits, so the refusal is made as the file system makes it."""
    import errno
    import tempfile

    real = tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and str(dir).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, dir=dir, **kwargs)

    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    r = invoke("reproduce", "sosp21", "--figure", "11", "--out", str(tmp_path / "ro"))
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "cannot create a file in" in said and "Read-only file system" in said, said
    assert not (tmp_path / "ro" / "points").exists()


def test_models_and_systems_filters(tmp_path):
    r = invoke("reproduce", "sosp21", "--figure", "12", "--models", "resnet50", "--systems", "ring,linear",
               "--out", str(tmp_path), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rate_sensitivity"] == {
        "resnet50": {s: {"reference": json.loads(r.stdout)["rate_sensitivity"]["resnet50"][s]["reference"]}
                     for s in ("ring", "linear")}}
    assert len(list((tmp_path / "points").iterdir())) == 2
    r = invoke("reproduce", "sosp21", "--figure", "12", "--systems", "byteps-onebit", "--out", str(tmp_path))
    assert r.exit_code == 2 and "in none of the chosen figures" in r.output


def test_ctrl_c_says_the_finished_points_are_kept(tmp_path, monkeypatch):
    """Sim mode ended on Ctrl-C with status 130 and not a word; real mode says what is kept and how to resume."""
    from hipress.sim.runner import SimRunner

    real_run, done = SimRunner.run, []

    def run_then_interrupt(self, p):
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(p)
        return real_run(self, p)

    monkeypatch.setattr(SimRunner, "run", run_then_interrupt)
    out = tmp_path / "out"
    r = invoke("reproduce", "sosp21", "--figure", "11", "--out", str(out))
    said = " ".join(r.output.split())
    assert r.exit_code == 130, r.output
    assert f"interrupted; finished points are kept in {out / 'points'}: run the same command again to resume" \
        in said, said
    assert len(list((out / "points").iterdir())) == 2
