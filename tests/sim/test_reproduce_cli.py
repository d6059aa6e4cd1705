"""``hipress reproduce sosp21`` end to end (figure 11: six simulations), resumability, bad input."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hipress_cli.app import build

runner = CliRunner()


def invoke(*args):
    return runner.invoke(build(), list(args))


def custom_report(tmp_path: Path, figures: dict[str, str]) -> dict:
    """``reproduce sosp21 --json`` on a custom ``--experiments`` folder of ``figures`` (file name -> TOML)."""
    exp = tmp_path / "exp"
    exp.mkdir()
    for name, text in figures.items():
        (exp / name).write_text(text)
    r = invoke("reproduce", "sosp21", "--experiments", str(exp), "--out", str(tmp_path / "out"), "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


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


@pytest.mark.parametrize("figure", ["7.0", "07", "+7", "7e0", "", "seven"])
def test_a_figure_is_one_of_the_names_exactly(tmp_path, figure):
    """--figure was an int option: Typer read 7.0 (and 07, +7) as figure 7 and ran it. It is refused now,
    with the figures there are, before anything is simulated or written."""
    r = invoke("reproduce", "sosp21", "--figure", figure, "--out", str(tmp_path / "out"))
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and f"no figure {figure!r}" in text, text
    assert "give exactly one of the figures it defines: 7, 8, 11, 12" in text
    assert not (tmp_path / "out").exists()


def test_bad_options(tmp_path):
    r = invoke("reproduce", "sosp21", "--mode", "magic", "--out", str(tmp_path))
    assert r.exit_code == 2 and "--mode must be sim or real" in r.output
    r = invoke("reproduce", "sosp21", "--figure", "9", "--out", str(tmp_path))
    assert r.exit_code == 2 and "no figure '9'" in r.output
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


def test_two_figures_of_one_kind_keep_their_own_results(tmp_path):
    """A custom --experiments with two breakdowns (vgg19 at 32 and at 8 GPUs) and two rate sweeps (128 and 16
    GPUs): the JSON's tables are keyed by model and step (or rate), so the later figure replaced the earlier's
    numbers. Each figure's results are now under by_figure; the merged tables keep the sosp21 format, the
    lower-numbered figure's value where two fill one entry."""
    breakdown = ('kind = "breakdown"\ncluster = "local"\nmodel = "vgg19"\ncompute_ms = 278.0\nalgorithm = "onebit"\n'
                 '[[steps]]\nname = "default"\nsystem = "byteps"\n')
    rate = ('kind = "rate"\ncluster = "aws"\nmodels = ["resnet50"]\nsystems = ["casync-ps"]\nalgorithm = "dgc"\n'
            'rates = [0.01]\n')
    report = custom_report(tmp_path, {"fig11.toml": f"figure = 11\ngpus = 32\n{breakdown}",
                                      "fig13.toml": f"figure = 13\ngpus = 8\n{breakdown}",
                                      "fig12.toml": f"figure = 12\ngpus = 128\n{rate}",
                                      "fig14.toml": f"figure = 14\ngpus = 16\n{rate}"})
    figs = report["by_figure"]
    assert {n: (f["kind"], f["cluster"]) for n, f in figs.items()} == {
        "11": ("breakdown", "local"), "12": ("rate", "aws"), "13": ("breakdown", "local"), "14": ("rate", "aws")}
    span = {n: figs[n]["breakdown_ms"]["vgg19"]["default"]["sync_span_ms"] for n in ("11", "13")}
    assert span["11"] > span["13"]  # byteps's sync grows with the GPU count: two results, not one twice
    tput = {n: figs[n]["rate_sensitivity"]["resnet50"]["casync-ps"]["0.01"] for n in ("12", "14")}
    assert tput["12"] > 2 * tput["14"]
    assert report["breakdown_ms"]["vgg19"]["default"]["sync_span_ms"] == span["11"]
    assert report["rate_sensitivity"]["resnet50"]["casync-ps"]["0.01"] == tput["12"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["by_figure"] == figs


def test_a_breakdown_of_another_size_or_cluster_is_not_set_against_the_published_bars(tmp_path):
    """Figure 11's bars were measured on the local cluster at 32 GPUs: a custom breakdown of vgg19 at 8 GPUs,
    or on aws, is a prediction only. Both were compared with them (error rows, findings), as if measured there."""
    steps = ('model = "vgg19"\ncompute_ms = 278.0\nalgorithm = "onebit"\n'
             '[[steps]]\nname = "default"\nsystem = "byteps"\n[[steps]]\nname = "secopa"\nsystem = "casync-ps"\n')
    report = custom_report(tmp_path, {
        f"fig{n}.toml": f'figure = {n}\nkind = "breakdown"\ncluster = "{cluster}"\ngpus = {gpus}\n{steps}'
        for n, cluster, gpus in ((13, "local", 8), (14, "aws", 32), (15, "local", 32))})
    assert {e["figure"] for e in report["errors"]} == {15}  # the published setting, and it alone
    assert len(report["errors"]) == 2
    claims = [c for c in report["findings"] if c["kind"] == "breakdown"]
    assert [c["step"] for c in claims] == ["default -> secopa"]
    fig15 = report["by_figure"]["15"]["breakdown_ms"]["vgg19"]["secopa"]["sync_span_ms"]
    assert claims[0]["predicted_change_pct"] == pytest.approx(
        100 * (fig15 / report["by_figure"]["15"]["breakdown_ms"]["vgg19"]["default"]["sync_span_ms"] - 1))


def test_the_sosp21_tables_are_every_figures_own_merged(tmp_path):
    """With one figure of each kind per cluster (the sosp21 directory), the merged tables are the figures' own."""
    r = invoke("reproduce", "sosp21", "--figure", "12", "--models", "resnet50", "--systems", "casync-ps,ring",
               "--out", str(tmp_path), "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["by_figure"]["12"]["rate_sensitivity"] == report["rate_sensitivity"]
    assert report["by_figure"]["12"]["title"].startswith("Throughput vs compression rate")


def test_real_mode_shows_figures_7_and_8_each(capsys):
    """Real mode runs figures 7 and 8 both on the one emulated cluster: the merged throughput table holds one
    of them; the terminal's tables are now one per figure, from by_figure."""
    from hipress.sim.experiments import Figure
    from hipress.sim.report import collect
    from hipress_cli.commands.reproduce import _render_real

    def rec(fig, value):
        return {"point": {"figure": fig, "cluster": "emulated-1gbit", "model": "resnet50", "system": "ring",
                          "gpus": 2}, "throughput": value}

    figs = [Figure(8, "scaling", "eight", "local", "fig8.toml"), Figure(7, "scaling", "seven", "aws", "fig7.toml")]
    throughput, _, _, by_figure = collect(figs, {7: [rec(7, 10.0)], 8: [rec(8, 12.0)]})
    assert throughput == {"emulated-1gbit": {"resnet50": {"ring": {"2": 10.0}}}}  # the lower figure's
    assert list(by_figure) == ["7", "8"]
    assert by_figure["8"] == {"kind": "scaling", "title": "eight", "cluster": "emulated-1gbit",
                              "throughput": {"emulated-1gbit": {"resnet50": {"ring": {"2": 12.0}}}}}
    _render_real({"by_figure": by_figure, "ratios": [], "figures": [], "wall_s": 1.0}, Path("out"))
    shown = " ".join(capsys.readouterr().out.split())
    assert "figure 7: measured throughput" in shown and "10.00" in shown
    assert "figure 8: measured throughput" in shown and "12.00" in shown


def test_a_plain_ctrl_c_is_named_in_the_stop_message():
    """Real mode's stop message said "error: ; the emulated cluster was removed ..." on a bare Ctrl-C: it
    wrote ``e or 'interrupted'``, and an exception is always true. A signal's words are kept."""
    from hipress.launch.runner import Interrupted
    from hipress_cli.commands.reproduce import _stopped_by

    assert _stopped_by(KeyboardInterrupt()) == "interrupted"
    assert _stopped_by(Interrupted("interrupted by SIGTERM", 143)) == "interrupted by SIGTERM"


def test_validate_help_says_how_long_it_takes():
    """--validate's help said "(many minutes)", written when the leave-one-out fits took 47 minutes here;
    they take 1 to 5 now (77 s, and about 4.5 minutes beside a full CI run)."""
    r = runner.invoke(build(), ["reproduce", "sosp21", "--help"], env={"COLUMNS": "200"})
    text = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 0
    assert "predict them (1 to 5 minutes on two cores, as busy as they are)" in text, text
