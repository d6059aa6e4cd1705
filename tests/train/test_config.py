"""Validation of a run before anything starts: clear errors, a non-zero exit, nothing launched."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from hipress.train.config import ConfigError, RunConfig, engine_topology, make_config
from hipress_cli.app import build


@pytest.mark.parametrize("topo,alg,engine", [
    ("ring", "tbq", "casync-ring"), ("ps", "onebit", "casync-ps"), ("ring", "none", "ring"), ("ps", "none", "ps"),
    ("casync-ring", "dgc", "casync-ring"), ("allgather", "tbq", "allgather"), ("allreduce", "none", "allreduce"),
    ("ddp", "none", "ddp"), ("ddp", "tbq", "ddp"),
])
def test_topology_mapping(topo, alg, engine):
    assert engine_topology(topo, alg) == engine


def test_allreduce_cannot_compress():
    with pytest.raises(ConfigError, match="use --alg none"):
        engine_topology("allreduce", "tbq")


@pytest.mark.parametrize("kwargs,match", [
    ({"model": "alexnet"}, "unknown model 'alexnet'; available: vgg19"),
    ({"model": "vgg19", "topology": "tree"}, "unknown topology 'tree'; use one of: ring, ps, allgather"),
    ({"model": "vgg19", "alg": "zip"}, "unknown compression algorithm 'zip'; available:"),
    ({"model": "vgg19", "alg": "dgc:ratio"}, "bad --alg"),
    ({"model": "vgg19", "np": 0}, "--np must be at least 1"),
    ({"model": "vgg19", "iters": 0}, "--iters must be at least 1"),
    ({"model": "vgg19", "data": "imagenet"}, "unknown data set"),
    ({"model": "vgg19", "data": "digits"}, "needs --model mlp"),
    ({"model": "vgg19", "input_size": 8}, "too small"),
    ({"model": "vgg19", "plan": "auto", "topology": "allgather"}, "--plan applies to CaSync"),
    ({"model": "vgg19", "plan": "/nonexistent/plan.txt"}, "does not exist"),
    ({"model": "vgg19", "bulk_bytes": -1}, "bulk_bytes must be >= 0"),
    ({"model": "vgg19", "topology": "ddp", "overlap": False}, "apply to the CaSync engine"),
    # bounds (issue 15): each names the option, the value and the bound
    ({"model": "vgg19", "np": 10**6}, "--np must be at most 1024, got 1000000"),
    ({"model": "vgg19", "batch_size": 10**12}, "--batch-size must be at most 65536, got 1000000000000"),
    ({"model": "vgg19", "input_size": 10**6}, "--input-size must be at most 4096, got 1000000"),
    ({"model": "lstm", "seq_len": 10**9}, "--seq-len must be at most 65536"),
    ({"model": "vgg19", "lr": float("inf")}, "--lr must be a finite number > 0, got inf"),
    ({"model": "vgg19", "lr": float("nan")}, "--lr must be a finite number > 0, got nan"),
    ({"model": "vgg19", "lr": -0.1}, "--lr must be a finite number > 0"),
    ({"model": "vgg19", "momentum": float("nan")}, "--momentum must be in [0, 1)"),
    ({"model": "vgg19", "threads": -1}, "--threads must be at least 0, got -1"),
    ({"model": "vgg19", "threads": 10**6}, "--threads must be at most 1024"),
    ({"model": "vgg19", "iters": 10**9}, "--iters must be at most"),
    ({"model": "vgg19", "seed": -1}, "--seed must be at least 0"),
    ({"model": "vgg19", "run_id": "../../x"}, "--run-id '../../x' is not a single directory name"),
    ({"model": "vgg19", "run_id": "a/b"}, "not a single directory name"),
    ({"model": "vgg19", "run_id": ".."}, "not a single directory name"),
    ({"model": "vgg19", "run_id": ""}, "not a single directory name"),
    ({"model": "vgg19", "run_id": "-rf"}, "not a single directory name"),
    ({"model": "vgg19", "run_id": "x\0y"}, "not a single directory name"),
    # --compress-after covering the whole run would label an uncompressed run compressed
    ({"model": "mlp", "alg": "tbq", "iters": 3, "warmup": 1, "compress_after": 4},
     "--compress-after 4 covers every iteration of this run (1 warm-up + --iters 3 = 4): nothing would be "
     "compressed, yet the run would be recorded as --alg tbq; use --alg none for an uncompressed run, or a smaller "
     "--compress-after (below 4); a first part to extend with --resume --iters past it needs --checkpoint-every"),
    # momentum twice: dgc's own velocity and SGD's (0.9 by default on synthetic data)
    ({"model": "mlp", "alg": "dgc:momentum=0.9"},
     "--alg dgc:momentum=0.9 keeps a velocity of its own (momentum 0.9) and SGD applies --momentum 0.9 as well"),
    # the digits' batches would be cut to a rank's share while throughput counted --batch-size
    ({"model": "mlp", "data": "digits", "np": 2, "batch_size": 5000},
     "--batch-size 5000 is more than a rank's share of the digits' training set (1437 samples over --np 2 = "
     "718): use --batch-size 718 or less"),
])
def test_bad_runs_are_refused_with_a_clear_error(kwargs, match):
    with pytest.raises(ConfigError, match=re.escape(match)):
        make_config(**kwargs)


def test_momentum_left_to_dgc_is_taken():
    assert make_config("mlp", alg="dgc:momentum=0.9", momentum=0.0).momentum == 0.0


def test_a_batch_of_a_whole_share_of_the_digits_is_taken():
    assert make_config("mlp", np=2, data="digits", batch_size=718).model_options["batch_size"] == 718


def test_compress_after_below_the_runs_length_is_taken():
    assert make_config("mlp", "ring", "tbq", 2, 3, warmup=1, compress_after=3).compress_after == 3
    assert make_config("mlp", "ring", "none", 2, 3, warmup=1, compress_after=100).compress_after == 100
    # checkpointed: the first part of a run that --resume --iters extends past the warm-up
    assert make_config("mlp", "ring", "tbq", 2, 2, warmup=1, compress_after=4, checkpoint_every=3).compress_after == 4


def test_a_plan_file_is_checked_against_the_model(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("fc1.weight,8192,y\n")
    with pytest.raises(ConfigError, match="bad.txt:1"):
        make_config("mlp", plan=str(bad))
    other = tmp_path / "other.txt"
    other.write_text("conv0.weight,1728,y,1\n")
    with pytest.raises(ConfigError, match="plan does not fit this model"):
        make_config("mlp", plan=str(other))
    good = tmp_path / "good.txt"
    good.write_text("fc2.bias,10,n,1\nfc2.weight,1280,y,2\nfc1.bias,128,n,1\nfc1.weight,8192,y,4\n")
    cfg = make_config("mlp", np=4, plan=str(good))  # K = 4 needs 4 ranks
    entries = cfg.plan_entries()
    assert entries["fc1.weight"].partitions == 4 and not entries["fc2.bias"].compress


def test_a_plan_with_more_partitions_than_ranks_is_refused(tmp_path):
    plan = tmp_path / "p.txt"
    plan.write_text("fc2.bias,10,n,1\nfc2.weight,1280,y,2\nfc1.bias,128,n,1\nfc1.weight,8192,y,4\n")
    # the check is hipress.plan.load_plan's (world_size): a PS plan made for a larger cluster
    with pytest.raises(ConfigError, match=r"more partitions than this run has ranks \(2\): fc1.weight \(K=4\)"):
        make_config("mlp", "ps", np=2, plan=str(plan))
    assert make_config("mlp", "ps", np=4, plan=str(plan)).plan_entries()["fc1.weight"].partitions == 4
    # a ring's K counts chunks (HiPress's meaning): K = 4 at 2 ranks is two rings of two chunks; more than
    # N rings of N chunks is refused
    assert make_config("mlp", "ring", np=2, plan=str(plan)).plan_entries()["fc1.weight"].partitions == 4
    plan.write_text("fc2.bias,10,n,1\nfc2.weight,1280,y,2\nfc1.bias,128,n,1\nfc1.weight,8192,y,5\n")
    with pytest.raises(ConfigError, match=r"more ring chunks than 2 rings of 2 chunks \(4\).*fc1.weight \(K=5\)"):
        make_config("mlp", "ring", np=2, plan=str(plan))


def test_good_run_ids_are_taken():
    for run_id in ("a", "vgg19-ps-tbq_1.2", "Run@2026,x+y=z"):
        assert make_config("mlp", run_id=run_id).run_id == run_id


def test_a_plan_with_another_frameworks_names_maps_by_position(tmp_path):
    # HiPress's files name parameters the MXNet way and list them in definition order
    mx = tmp_path / "mx.txt"
    mx.write_text("dense0_weight,8192,y,4\ndense0_bias,128,n,1\ndense1_weight,1280,y,2\ndense1_bias,10,n,1\n")
    entries = make_config("mlp", np=4, plan=str(mx)).plan_entries()
    assert entries["fc1.weight"].partitions == 4 and entries["fc2.weight"].partitions == 2
    assert not entries["fc1.bias"].compress and not entries["fc2.bias"].compress
    mx.write_text("dense0_weight,8192,y,4\ndense0_bias,128,n,1\ndense1_weight,1281,y,2\ndense1_bias,10,n,1\n")
    with pytest.raises(ConfigError, match="1281"):
        make_config("mlp", np=4, plan=str(mx))


def test_config_round_trips_through_json(tmp_path):
    cfg = make_config("vgg19", "ps", "onebit", np=4, iters=3)
    cfg.write(tmp_path)
    back = RunConfig.read(tmp_path)
    assert back == cfg
    assert back.model_options == {"input_size": 32, "batch_size": 4} and not back.paper_scale
    assert back.units_per_iteration == 16 and back.parameters == 143_667_240
    assert make_config("transformer", np=2).units_per_iteration == 2 * 4 * 32  # tokens
    assert back.overlap and back.bulk_bytes is None
    held = make_config("mlp", "ps", "onebit", overlap=False, bulk_bytes=0)
    held.write(tmp_path)
    assert RunConfig.read(tmp_path) == held and not held.overlap and held.bulk_bytes == 0


def test_lr_schedule_is_recorded_and_old_files_mean_constant(tmp_path):
    """The schedule travels in config.json; a file written before schedules existed trained at a
    constant rate; a file naming no known schedule is refused on reading (a resume reads it)."""
    import json

    cfg = make_config("mlp", iters=7, warmup=1, lr=0.2, lr_schedule="step")
    cfg.write(tmp_path)
    back = RunConfig.read(tmp_path)
    assert back == cfg and back.lr_schedule == "step" and back.length == 8
    assert [back.lr_at(t) for t in (0, 3, 4, 5, 6, 7)] == pytest.approx([0.2, 0.2, 0.02, 0.02, 0.002, 0.002])
    d = json.loads((tmp_path / "config.json").read_text())
    del d["lr_schedule"]
    old = RunConfig.from_json(json.dumps(d))
    assert old.lr_schedule == "constant" and {old.lr_at(t) for t in range(8)} == {0.2}
    with pytest.raises(ConfigError, match="config.json: unknown --lr-schedule 'linear'; use one of: constant"):
        RunConfig.from_json(json.dumps({**d, "lr_schedule": "linear"}))


@pytest.mark.parametrize("length", [1, 2, 3, 4])
def test_every_schedule_starts_at_the_base_rate_however_short_the_run(length):
    """A 1-iteration step schedule had its milestones at 0 and 0: it trained at 0.01x from the start."""
    from hipress.lr_schedules import SCHEDULES

    for s in SCHEDULES.values():
        assert s.rate(0.2, 0, length) == 0.2, (s.name, length)
    assert [SCHEDULES["step"].rate(1.0, t, 4) for t in range(4)] == pytest.approx([1, 1, 0.1, 0.01])


@pytest.mark.parametrize("length,want", [(2, [1, 0.1]), (3, [1, 1, 0.1]), (5, [1, 1, 1, 0.1, 0.01]),
                                         (7, [1, 1, 1, 1, 0.1, 0.1, 0.01])])
def test_step_decays_only_once_the_run_is_half_and_three_quarters_through(length, want):
    """Milestones rounded down decayed a 3-iteration run at its second iteration, 33 % through."""
    from hipress.lr_schedules import SCHEDULES

    rates = [SCHEDULES["step"].rate(1.0, t, length) for t in range(length)]
    assert rates == pytest.approx(want)
    assert all((r < 1) == (t / length >= 0.5) and (r < 0.1) == (t / length >= 0.75) for t, r in enumerate(rates))


def test_a_checkpoint_must_match_the_runs_lr_schedule(tmp_path):
    """A checkpoint's rates are recomputed from the run's schedule on resume, so the schedule is part of
    its identity; checkpoints written before it was (no ``lr_schedule``) were written at a constant rate."""
    import torch

    from hipress.train import checkpoint

    cfg = make_config("mlp", np=1, iters=2, lr_schedule="cosine", run_id="r")
    blob = {"identity": checkpoint._identity(cfg, 0), "iteration": 1, "model": {}, "sync": {}, "rng": {}}
    path = checkpoint.path_for(tmp_path, 0)
    path.parent.mkdir()
    torch.save(blob, path)
    assert checkpoint.load(tmp_path, 0, cfg)["iteration"] == 1
    constant = make_config("mlp", np=1, iters=2, run_id="r")
    with pytest.raises(ConfigError, match="lr_schedule: 'cosine' in the checkpoint, 'constant' in the run"):
        checkpoint.load(tmp_path, 0, constant)
    del blob["identity"]["lr_schedule"]  # as written before the schedule was recorded
    torch.save(blob, path)
    assert checkpoint.load(tmp_path, 0, constant)["iteration"] == 1
    with pytest.raises(ConfigError, match="lr_schedule: 'constant' in the checkpoint, 'cosine' in the run"):
        checkpoint.load(tmp_path, 0, cfg)


def test_a_checkpoint_write_removes_what_a_killed_write_of_its_rank_left(tmp_path):
    """A rank killed (SIGKILL) while writing its checkpoint leaves write_atomic's temporary (seen: a
    `.rank-1.pt.XXXXXXXX.tmp` after `kill -9` of rank 1 of `hipress run --checkpoint-every 2`), as large as the
    part written (a model's size for vgg19), and nothing removed it: one more per killed run. The rank's next
    write now does; other ranks' and other files' temporaries are not its business."""
    from types import SimpleNamespace

    import torch

    from hipress.models import get
    from hipress.train import checkpoint

    cfg = make_config("mlp", np=2, iters=3, run_id="r")
    model = get("mlp").build(**cfg.model_options)
    runner = SimpleNamespace(opt=torch.optim.SGD(model.parameters(), lr=cfg.lr))
    folder = checkpoint.path_for(tmp_path, 1).parent
    folder.mkdir()
    left = [folder / ".rank-1.pt.4od_l9nj.tmp", folder / ".rank-1.pt.x.tmp"]
    others = [folder / ".rank-0.pt.abcdefgh.tmp", folder / ".rank-11.pt.abcdefgh.tmp", folder / "notes.tmp"]
    for f in left + others:
        f.write_bytes(b"partial")
    checkpoint.save(tmp_path, 1, cfg, 4, model, runner)
    assert not [f for f in left if f.exists()] and all(f.exists() for f in others)
    assert checkpoint.load(tmp_path, 1, cfg)["iteration"] == 4


def test_resume_takes_the_latest_iteration_every_ranks_checkpoints_have(tmp_path):
    """A run stopped while its ranks wrote: rank 0 at 9 (previous 6), rank 1 at 6 (previous 3): 6, which both
    have; a rank's damaged or foreign previous file is not fallen back on; no iteration in common is refused."""
    import torch

    from hipress.train import checkpoint

    cfg = make_config("mlp", np=2, iters=20, run_id="r")

    def write(rank: int, iteration: int, prev: bool = False) -> None:
        blob = {"identity": checkpoint._identity(cfg, rank), "iteration": iteration, "model": {}, "sync": {},
                "rng": {}}
        path = (checkpoint.previous_path if prev else checkpoint.path_for)(tmp_path, rank)
        path.parent.mkdir(exist_ok=True)
        torch.save(blob, path)

    write(0, 9), write(0, 6, prev=True), write(1, 6), write(1, 3, prev=True)
    assert checkpoint.check_resumable(tmp_path, cfg) == 6
    assert checkpoint.common_iteration(tmp_path, {0: 9, 1: 9}, {}) == 9
    write(1, 3)  # now rank 1 at 3, previous 3: nothing in common with rank 0's 9 and 6
    with pytest.raises(ConfigError, match="no iteration has a checkpoint on every rank"):
        checkpoint.check_resumable(tmp_path, cfg)
    write(1, 6), checkpoint.previous_path(tmp_path, 0).write_bytes(b"damaged")
    with pytest.raises(ConfigError, match=r"different iterations \(\{0: 9, 1: 6\}\)"):
        checkpoint.check_resumable(tmp_path, cfg)
    (checkpoint.path_for(tmp_path, 1)).unlink()
    with pytest.raises(ConfigError, match=r"no checkpoint for rank 1 .* though rank-0.pt is there"):
        checkpoint.check_resumable(tmp_path, cfg)


def test_a_missing_checkpoint_says_where_a_hosts_run_keeps_it(tmp_path):
    """A ``--hosts`` run whose launcher was killed (SIGKILL) before fetching leaves its checkpoints on the hosts;
    ``--resume`` said "the run was not started with --checkpoint-every N ...; start it again" of a run started
    with it. The message now tells the two apart by the run's own ``checkpoint_every`` and, for one that
    checkpoints, says where the hosts keep what was not fetched; so does one for a rank's missing file."""
    from hipress.launch.remote import DEFAULT_REMOTE_DIR
    from hipress.train import checkpoint

    run_dir = tmp_path / "k2"
    run_dir.mkdir()
    hosts = f"on that host, in ~/{DEFAULT_REMOTE_DIR}/k2/<i>-<host>/checkpoint/"
    with pytest.raises(ConfigError) as e:
        checkpoint.check_resumable(run_dir, make_config("mlp", np=2, iters=20, run_id="k2", checkpoint_every=2))
    text = str(e.value)
    assert "not started with" not in text and "(--checkpoint-every 2) stopped before its first checkpoint" in text
    assert f"its launcher ended before fetching a host's results (killed, or the host lost): they are then {hosts}" \
        in text, text
    with pytest.raises(ConfigError) as e:
        checkpoint.check_resumable(run_dir, make_config("mlp", np=2, iters=20, run_id="k2"))
    assert "started without --checkpoint-every N, so there is nothing to resume from" in str(e.value)
    assert "hosts" not in str(e.value)
    checkpoint.path_for(run_dir, 0).parent.mkdir()
    checkpoint.path_for(run_dir, 0).write_bytes(b"x")
    with pytest.raises(ConfigError) as e:
        checkpoint.load(run_dir, 1, make_config("mlp", np=2, iters=20, run_id="k2", checkpoint_every=2))
    assert "though rank-0.pt is there" in str(e.value) and hosts in str(e.value), str(e.value)


@pytest.mark.parametrize("args,match", [
    (["run", "alexnet"], "unknown model 'alexnet'"),
    (["run", "VGG19"], "unknown model 'VGG19' (did you mean 'vgg19'?)"),
    (["run", "vgg19", "--np", "0"], "--np must be at least 1"),
    (["run", "vgg19", "--alg", "zip"], "unknown compression algorithm"),
    (["run", "vgg19", "--topo", "tree"], "unknown topology"),
    (["run", "vgg19", "--plan", "missing.txt"], "does not exist"),
])
def test_cli_errors_exit_2_before_starting_anything(args, match, tmp_path):
    res = CliRunner().invoke(build(), [*args, "--results", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    assert match in " ".join(res.output.split())
    assert list(tmp_path.iterdir()) == []  # no run directory was made


@pytest.mark.slow
def test_models_command_lists_real_sizes():
    import json

    res = CliRunner().invoke(build(), ["models", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["model"]: r for r in json.loads(res.output)}
    assert list(rows) == ["vgg19", "resnet50", "bert", "transformer", "lstm", "ugatit"]
    assert rows["vgg19"]["gradient_bytes"] == 4 * 143_667_240
    assert rows["ugatit"]["cpu_parameters"] < rows["ugatit"]["parameters"]
    table = CliRunner().invoke(build(), ["models"], env={"COLUMNS": "200"})
    assert "548.0" in table.output and "32px b4" in table.output


def test_models_table_keeps_every_column_at_80_columns():
    """In a pipe (80 columns) the 'run default' column came out blank, its header and every value."""
    table = CliRunner().invoke(build(), ["models"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert max(map(len, lines)) <= 80
    words = table.output.split()
    assert "default" in words and "32px" in words and "(209M" in words and "params)" in words


def test_comp_threshold_becomes_the_plans_compress_flags(tmp_path):
    from hipress.sync import topologies
    from hipress.sync.program import DEFAULT_PARTITION_BYTES
    from hipress.train.threshold import DEFAULT_COMP_THRESHOLD

    assert make_config("vgg19", "ps").plan is None  # the library's default: compress everything, as before
    assert make_config("vgg19", "ps", comp_threshold=0).plan is None  # 0 without a plan: the engine's own default
    cfg = make_config("vgg19", "ps", np=4, comp_threshold="default")
    assert cfg.comp_threshold == DEFAULT_COMP_THRESHOLD
    parts = topologies.get("casync-ps").default_partitions
    for name, size, compress, k in cfg.plan:
        assert compress == (size >= DEFAULT_COMP_THRESHOLD), name
        assert k == parts(size, 4, DEFAULT_PARTITION_BYTES), name  # partitioning as without a threshold
    assert sum(e[2] for e in cfg.plan) == 21 and len(cfg.plan) == 38  # 19 weights + the two 4096 fc biases
    assert make_config("vgg19", "ddp", comp_threshold="default").comp_threshold is None  # not CaSync: no threshold
    # with a plan: compressed when the plan says so AND the gradient reaches the threshold
    plan = tmp_path / "p.txt"
    plan.write_text("fc2.bias,10,y,1\nfc2.weight,1280,y,2\nfc1.bias,128,n,1\nfc1.weight,8192,y,2\n")
    with_plan = make_config("mlp", np=2, plan=str(plan), comp_threshold=1000).plan_entries()
    assert [with_plan[n].compress for n in ("fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight")] == [
        False, True, False, True]
    assert make_config("mlp", np=2, plan=str(plan), comp_threshold="default").plan_entries()["fc2.bias"].compress


def test_comp_threshold_entries_run_the_engines_own_ring_partitions():
    """Without a plan, ``--comp-threshold`` writes the engine's default partitions as plan entries; a
    ring plan's K counts chunks (``hipress.sync.plan``), so the engine reads back exactly its own."""
    from hipress.sync import topologies
    from hipress.sync.plan import engine_partitions
    from hipress.sync.program import DEFAULT_PARTITION_BYTES

    cfg = make_config("vgg19", "ring", np=4, comp_threshold="default")
    parts = topologies.get("casync-ring").default_partitions
    got = {n: engine_partitions(k, True, 4) for n, _s, _c, k in cfg.plan}
    assert got == {n: parts(s, 4, DEFAULT_PARTITION_BYTES) for n, s, _c, _k in cfg.plan}
    assert max(got.values()) > 1  # VGG19's fc layers are pipelined in several rings


def test_plan_auto_profiles_the_codecs_where_the_run_trains(monkeypatch):
    """``--plan auto`` on a GPU run must time encode/decode on the GPU: SeCoPa's decisions follow the
    codec costs, and a GPU's are not the CPU's. The measuring is replaced here (no GPU); what is
    checked is that the run's device reaches it."""
    from hipress.plan import load_cost_model, profile
    from hipress.train.config import resolve_plan

    seen = []

    def fake_profile(alg, **kw):
        seen.append(kw.get("device"))
        return load_cost_model("sosp21")

    monkeypatch.setattr(profile, "profile", fake_profile)
    sizes = [("b", 10), ("w", 1 << 20)]
    for device in ("cuda", "cpu"):
        entries = resolve_plan("auto", sizes, 2, "tbq", "casync-ring", device=device)
        assert [e[0] for e in entries] == ["b", "w"]
    assert seen == ["cuda", "cpu"]


def test_stray_spaces_around_alg_are_not_recorded():
    """--alg ' tbq' (a pasted space) ran tbq but config.json, the summary and the run directory said ' tbq'."""
    cfg = make_config("mlp", "ring", " tbq:block=0 ", 2, 1)
    assert cfg.alg == "tbq:block=0"


def test_a_run_without_a_plan_counts_the_model_without_a_pass(monkeypatch):
    """The pre-flight needs the ready order (a forward/backward pass, seconds for a big model) only for
    plan entries; a run that has none (here: an uncompressed all-reduce) counts parameters from the meta build.
    A CaSync run's entries are still in the ready order, as before."""
    from hipress.models import gradient_sizes, introspect

    ready = gradient_sizes("resnet50")
    casync = make_config("resnet50", "ring", "tbq", comp_threshold="default")  # `hipress run`'s default
    assert [e[0] for e in casync.plan] == [n for n, _ in ready]

    def no_pass(*_a, **_k):
        raise AssertionError("the pre-flight ran a forward/backward pass")

    monkeypatch.setattr(introspect, "_ready_order", no_pass)
    cfg = make_config("resnet50", "allreduce", "none", comp_threshold="default")
    assert cfg.plan is None
    assert (cfg.parameters, cfg.gradient_bytes, cfg.meta["gradients"]) == (25_557_032, 4 * 25_557_032, 161)
    assert (cfg.parameters, cfg.meta["gradients"]) == (casync.parameters, casync.meta["gradients"])
