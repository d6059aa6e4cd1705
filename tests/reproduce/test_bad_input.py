"""Bad real.toml, unknown --models/--systems, --hosts out of range, no root: exit 2 with a clear message."""

from __future__ import annotations

import re

import pytest

from hipress.reproduce import SettingsError, load_settings

from .conftest import SOSP21, TINY_REAL, experiments, invoke


def test_the_checkouts_real_toml_is_valid():
    s = load_settings(SOSP21 / "real.toml", [0.001, 0.005, 0.01, 0.05, 0.1, 0.25])
    assert s.default_models == ("vgg19", "resnet50") and set(s.models) >= {"vgg19", "resnet50", "bert"}
    assert s.counts_up_to(4) == [1, 2, 4] and s.counts_up_to(3) == [1, 2, 3]


@pytest.mark.parametrize("change,match", [
    (("host_counts = [2]", "host_counts = [2, 8]"), "host_counts[1] must be an integer between 1 and 4, not 8"),
    (("host_counts = [2]", "host_counts = 2"), "host_counts must be a non-empty list"),
    (("iters = 1", "iters = 0"), "iters must be an integer >= 1"),
    (("warmup = 0", "warmup = -1"), "warmup must be an integer >= 0"),
    (("input_size = 32", "input_size = 32\nseq_len = 8"), "takes no option 'seq_len'"),
    (("batch_size = 2", "batch_size = 0"), "batch_size must be an integer >= 1, not 0"),
    (("input_size = 32", "input_size = 32\ncolour = 3"), "unknown field(s) 'colour'"),
    (('default_models = ["resnet50"]', 'default_models = ["vgg19"]'), "have no [models.NAME] table"),
    (("fig12_rates = [0.01]", "fig12_rates = [0.02]"), "not among fig12.toml's rates"),
    (("[models.resnet50]", "[models.alexnet]"), "unknown model 'alexnet'"),
    (("iters = 1", "iters = 1\nspeed = 3"), "unknown field(s) 'speed'"),
    (("iters = 1", "iters = = 1"), "not valid TOML"),
])
def test_bad_real_toml(tmp_path, change, match):
    path = tmp_path / "real.toml"
    path.write_text(TINY_REAL.replace(*change))
    with pytest.raises(SettingsError, match=re.escape(match)) as e:
        load_settings(path, [0.001, 0.01])
    assert str(path) in str(e.value)
    # and the command exits 2 with it, before building anything
    exp = experiments(tmp_path, figs=("fig7", "fig12"))
    (exp / "real.toml").write_text(TINY_REAL.replace(*change))
    r = invoke("reproduce", "sosp21", "--mode", "real", "--experiments", str(exp), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2, r.output
    assert match.split("(")[0].split("'")[0] in " ".join(r.output.split())


@pytest.mark.parametrize("mode", ["sim", "real"])
@pytest.mark.parametrize("args,match", [
    (("--models", "vgg19,alexnet"), "unknown model 'alexnet' in --models"),
    (("--models", "VGG19"), "unknown model 'VGG19' in --models (did you mean 'vgg19'?)"),
    (("--systems", "BytePS"), "unknown system 'BytePS' in --systems (did you mean 'byteps'?)"),
    (("--systems", "byteps,horovod"), "unknown system 'horovod' in --systems"),
    (("--models", "bert"), "--models bert: in none of the chosen figures"),
])
def test_unknown_filters(tmp_path, mode, args, match):
    exp = experiments(tmp_path)
    r = invoke("reproduce", "sosp21", "--mode", mode, "--experiments", str(exp), "--out", str(tmp_path / "o"), *args)
    assert r.exit_code == 2, r.output
    assert match in " ".join(r.output.split())


@pytest.mark.parametrize("hosts", ["0", "5"])
def test_hosts_out_of_range(tmp_path, hosts):
    r = invoke("reproduce", "sosp21", "--mode", "real", "--hosts", hosts, "--out", str(tmp_path))
    assert r.exit_code == 2 and "--hosts" in r.output


def test_without_root_real_mode_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    exp = experiments(tmp_path)
    r = invoke("reproduce", "sosp21", "--mode", "real", "--experiments", str(exp), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "needs root" in out and "--mode sim" in out


def test_bad_rate(tmp_path):
    exp = experiments(tmp_path)
    r = invoke("reproduce", "sosp21", "--mode", "real", "--rate", "fast", "--experiments", str(exp),
               "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "--rate: rate 'fast' is not understood" in " ".join(r.output.split())
    assert not (tmp_path / "o").exists(), "the rate is checked before anything is written"


@pytest.mark.parametrize("mode", ["sim", "real"])
@pytest.mark.parametrize("args,match", [
    (("--models", "vgg19,"), "--models 'vgg19,': item 2 of 2 is empty (two commas in a row, or one at an end"),
    (("--systems", "byteps,,ring"), "--systems 'byteps,,ring': item 2 of 3 is empty"),
    (("--models", ""), "--models is empty (an unset variable?): give one or more names, e.g. vgg19,resnet50"),
    (("--systems", " "), "--systems is empty (an unset variable?): give one or more names, e.g. byteps,casync-ps"),
])
def test_empty_filters_are_refused_as_empty(tmp_path, mode, args, match):
    """'vgg19,' (an unset "$M2") ran vgg19 alone, the empty item dropped; --models '' said the filters left
    no point in the figures, as if they had none. Both exit 2 before anything runs or is written."""
    exp = experiments(tmp_path)
    r = invoke("reproduce", "sosp21", "--mode", mode, "--experiments", str(exp), "--out", str(tmp_path / "o"), *args)
    assert r.exit_code == 2, r.output
    assert match in " ".join(r.output.split()), r.output
    assert not (tmp_path / "o").exists()
