"""``hipress run --hosts``: the training worker on two "hosts" through the test sshd, results fetched here."""

from __future__ import annotations

import json
import os
import platform
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hipress_cli.app import build

from ..procs import stop_rank_1_and_follow
from ..runs import finished_run
from .sshd import sshd_children, wait_until

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
REMOTE_BASE = Path("~/.cache/hipress/runs").expanduser()


@pytest.fixture
def run_ids() -> Iterator[Callable[[str], str]]:
    """``run_ids(stem)``: a run id of this test alone (``stem-<8 hex>``); after the test, its directory on the
    "hosts" (``REMOTE_BASE/<id>``) is removed whatever became of the run.

    Why: these runs use the default remote directory, ~/.cache/hipress/runs, which every test session on this
    machine shares (other worktrees' too). With fixed run ids, a run that failed or was killed before its
    launcher fetched its results left ``REMOTE_BASE/<id>/<i>-<host>``, and every later run of that id (this
    test again, in any session) was refused there ("is there already, left by an earlier job"); two sessions
    running the same test at once refused each other ("held by another launcher of run ...")."""
    made: list[str] = []

    def new(stem: str) -> str:
        made.append(f"{stem}-{secrets.token_hex(4)}")
        return made[-1]

    yield new
    for run_id in made:
        shutil.rmtree(REMOTE_BASE / run_id, ignore_errors=True)


def _ssh_args(sshd, known_hosts) -> list[str]:
    return ["--ssh-port", str(sshd.port), "--ssh-key", str(sshd.client_key), "--known-hosts", str(known_hosts)]


def _hipress(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hipress_cli.app", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200", **(env or {})})


def _text(s: str) -> str:
    return " ".join(s.replace("│", " ").split())


def test_run_on_two_hosts(sshd, known_hosts, tmp_path, run_ids):
    results, run_id = tmp_path / "results", run_ids("two-hosts")
    r = _hipress(["run", "mlp", "--iters", "2", "--hosts", "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts),
                  "--results", str(results), "--run-id", run_id, "--json"])
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["status"], summary["np"], summary["measured_iterations"]) == ("ok", 2, 2)
    run_dir = results / run_id
    assert {"config.json", "events.jsonl", "summary.json", "output.log"} <= {p.name for p in run_dir.iterdir()}
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["iter"] for e in events if e.get("event") == "iteration"] == [0, 1, 2]
    assert "pre-flight on 2 host(s)" in r.stderr
    assert not (REMOTE_BASE / run_id).exists(), "remote run directories must be removed"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_plan_auto_on_hosts_profiles_the_transport_between_them(sshd, known_hosts, tmp_path, run_ids):
    """--plan auto --hosts: the quick profile's MPI transport runs on the hosts, over SSH, as the run's ranks
    will talk (it used to run on this machine's loopback), and its codec on the first host, with the run's
    own CompLL algorithm installed there from its spec (it was timed on this machine); the plan it gives is
    the run's."""
    spec = Path(__file__).parents[1] / "compll" / "data" / "user" / "scaledsign.pse"
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "scaledsign.pse").write_text(spec.read_text())
    results, run_id = tmp_path / "results", run_ids("planned")
    r = _hipress(["run", "mlp", "--iters", "1", "--topo", "ps", "--alg", "scaledsign", "--compll-dir", str(specs),
                  "--plan", "auto", "--hosts", "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts),
                  "--results", str(results), "--run-id", run_id, "--json"])
    assert r.returncode == 0, r.stderr
    text = _text(r.stderr)
    assert "the transport measured on hosts 127.0.0.1:1, 127.0.0.2:1, the codec timed on 127.0.0.1" in text, text
    assert text.count("pre-flight on 2 host(s)") == 1, text  # the run's own; the profile's runs quietly
    assert json.loads(r.stdout)["status"] == "ok"
    assert (results / run_id / "plan.txt").is_file()
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_profile_on_hosts_times_the_codec_on_the_first_host(sshd, known_hosts, tmp_path):
    out = tmp_path / "p.json"
    r = _hipress(["profile", "--alg", "onebit", "--sizes", "1K,16K", "--repeat", "2", "--hosts",
                  "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts), "--output", str(out)])
    assert r.returncode == 0, r.stderr
    p = json.loads(out.read_text())
    assert p["meta"]["compute_host"] == platform.node()  # the hosts are this machine: their name is its
    assert p["meta"]["hosts"] == ["127.0.0.1:1", "127.0.0.2:1"] and p["encode"]["fit"]["points"]
    r = _hipress(["profile", "--alg", "nope", "--sizes", "1K,16K", "--hosts", "127.0.0.1:1,127.0.0.2:1",
                  *_ssh_args(sshd, known_hosts), "--output", str(tmp_path / "x.json")])
    assert r.returncode == 2 and "nope" in r.stderr and "transport" not in r.stderr, r.stderr  # before any job
    import torch

    if torch.version.cuda is None:  # the first host decides --device: its torch sees no GPU, and says so
        r = _hipress(["profile", "--alg", "onebit", "--sizes", "1K,16K", "--device", "cuda", "--hosts",
                      "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts), "--output", str(tmp_path / "x.json")])
        assert r.returncode == 2, r.stderr
        assert f"profile_worker on {platform.node()}: cannot time 'onebit': --device cuda was requested" in \
            _text(r.stderr), r.stderr


def test_rank_failure_on_a_remote_host_is_reported(sshd, known_hosts, tmp_path, run_ids):
    results, run_id = tmp_path / "results", run_ids("fault")
    r = _hipress(["run", "mlp", "--iters", "1", "--warmup", "0", "--hosts", "127.0.0.1,127.0.0.2",
                  *_ssh_args(sshd, known_hosts), "--results", str(results), "--run-id", run_id],
                 env={"HIPRESS_FAULT": "1:0:raise"})
    assert r.returncode == 1, r.stdout + r.stderr
    text = _text(r.stderr)
    assert "rank 1 (on 127.0.0.2) failed: RuntimeError: fault injected by HIPRESS_FAULT=1:0:raise" in text, text
    errors = [json.loads(x) for x in (results / run_id / "errors.jsonl").read_text().splitlines()]
    assert errors[0]["rank"] == 1  # written on 127.0.0.2, merged here
    assert json.loads((results / run_id / "summary.json").read_text())["status"] == "failed"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_bad_host_options_fail_before_anything_starts(sshd, known_hosts, tmp_path, run_ids):
    runner = CliRunner()
    results, never = tmp_path / "results", run_ids("never")
    base = ["run", "mlp", "--results", str(results), *_ssh_args(sshd, known_hosts)]
    r = runner.invoke(build(), [*base, "--hosts", "127.0.0.1:2,127.0.0.2", "--np", "4"])
    assert r.exit_code == 2 and "disagrees with the 3 slot(s)" in _text(r.output)
    r = runner.invoke(build(), [*base, "--hosts", "127.0.0.1,node$(reboot)"])
    assert r.exit_code == 2 and "'$'" in _text(r.output)
    r = runner.invoke(build(), [*base, "--hosts", "127.0.0.1,127.0.0.3", "--run-id", never])
    assert r.exit_code == 2
    assert "1 of 2 host(s) not ready" in _text(r.output) and "127.0.0.3" in _text(r.output)
    assert not (results / never).exists()
    r = runner.invoke(build(), [*base[:4], "--hosts", "127.0.0.2", "--ssh-port", str(sshd.port), "--ssh-key",
                                str(sshd.client_key), "--known-hosts", str(tmp_path / "empty"), "--run-id", never])
    assert r.exit_code == 2 and "--accept-new-host-keys" in _text(r.output)
    assert not (results / never).exists()


def test_the_hosts_gpus_decide_the_device(sshd, known_hosts, tmp_path, run_ids):
    """Pre-flight counts each host's GPUs; --device cuda names the hosts without one (not this machine's
    torch build), before anything starts there."""
    import torch

    if torch.version.cuda is not None:  # (this process is kept from the GPU; the sshd's sessions are not)
        pytest.skip("the test's hosts are this machine, whose torch has CUDA: they may see a GPU")
    results, never = tmp_path / "results", run_ids("never")
    r = CliRunner().invoke(build(), ["run", "mlp", "--results", str(results), *_ssh_args(sshd, known_hosts),
                                     "--hosts", "127.0.0.1,127.0.0.2", "--device", "cuda", "--run-id", never])
    assert r.exit_code == 2, r.output
    assert "torch sees no GPU on 2 of 2 host(s): 127.0.0.1 (none), 127.0.0.2 (none)" in _text(r.output)
    assert not (results / never).exists()
    assert wait_until(lambda: not sshd_children(sshd), 10), "pre-flight's connections were left open"


@pytest.mark.gpu
def test_a_run_on_hosts_with_a_gpu_trains_on_it(sshd, known_hosts, tmp_path, run_ids):
    """On the GPU machine (``.ci/gpu-check``'s ``-m gpu``): pre-flight counts the hosts' GPU, --device auto
    is CUDA there although the launcher decides nothing from its own torch, and the two ranks (one per
    "host", the same machine) share the one GPU over the MPI transport."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU is visible to torch (torch.cuda.is_available() is False)")
    results = tmp_path / "results"
    r = _hipress(["run", "mlp", "--iters", "2", "--hosts", "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts),
                  "--device", "auto", "--results", str(results), "--run-id", run_ids("gpu-hosts"), "--json"],
                 env={"CUDA_VISIBLE_DEVICES": ""})  # the launcher sees no GPU, as on a login node
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["status"], summary["device"], summary["np"]) == ("ok", "cuda", 2), summary
    assert summary["gpu_name"] and summary["ranks_per_gpu"] == 2, summary
    assert wait_until(lambda: not sshd_children(sshd), 10)


def _events(run_dir: Path) -> list[tuple[str, object]]:
    return [(e["event"], e.get("iter")) for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())]


def _checkpoint_iteration(run_dir: Path, rank: int) -> int:
    import torch

    return int(torch.load(run_dir / "checkpoint" / f"rank-{rank}.pt", weights_only=True)["iteration"])


def test_resumed_run_on_two_hosts_continues_like_a_local_one(sshd, known_hosts, tmp_path, run_ids):
    """A run and two resumes over --hosts end as the same run and resumes on this machine do: each resume
    starts from the previous part's last checkpoint, every event is there once, and each part ends ok."""
    hosts = ["--hosts", "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts)]
    parts = [["--iters", "4", "--checkpoint-every", "2"], ["--iters", "8"], ["--iters", "12"]]
    # (where, how the run starts, how a resume is launched: --np is the run's configuration, --hosts is not)
    run_id = run_ids("resumed")
    for where, first, again in (("local", ["--np", "2"], []), ("remote", hosts, hosts)):
        run_dir = tmp_path / where / run_id
        for i, part in enumerate(parts):
            args = ["run", "mlp", *first, *part, "--results", str(run_dir.parent), "--run-id", run_dir.name] \
                if i == 0 else ["run", "--resume", str(run_dir), *part, *again]
            r = _hipress([*args, "--json"])
            assert r.returncode == 0, f"{where} part {i}: {r.stderr}"
            summary = json.loads(r.stdout)
            done = 1 + 4 * (i + 1)  # one warm-up iteration, then --iters
            assert (summary["status"], summary["iterations"]) == ("ok", done), (where, i, summary)
            assert [_checkpoint_iteration(run_dir, rank) for rank in range(2)] == [done, done], (where, i)
    local, remote = tmp_path / "local" / run_id, tmp_path / "remote" / run_id
    assert _events(remote) == _events(local)
    assert [e for e, _ in _events(remote)].count("iteration") == 13
    assert not (remote / "hosts").exists(), "a resumed run's new files must replace the old, not conflict with them"
    assert {p.name for p in remote.iterdir()} == {p.name for p in local.iterdir()}
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_stall_watchdog_names_a_stalled_rank_on_another_host(sshd, known_hosts, tmp_path, run_ids):
    """--stall-timeout over --hosts: the beats of the ranks on their hosts reach the watchdog here, which warns,
    then stops the run naming the rank that hangs, well before the ranks' own collective timeouts (60 s)."""
    results, run_id = tmp_path / "results", run_ids("stall")
    t0 = time.monotonic()
    r = _hipress(["run", "mlp", "--iters", "3000", "--hosts", "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts),
                  "--stall-timeout", "6", "--results", str(results), "--run-id", run_id],
                 env={"HIPRESS_FAULT": "1:3:hang"})
    elapsed = time.monotonic() - t0
    out, err = _text(r.stdout), _text(r.stderr)
    assert r.returncode == 1, out + err
    assert "warning: rank 1 has made no progress" in out, out
    assert "rank 1 made no progress for" in err and "(stalled in forward/backward of iteration 3)" in err, err
    assert elapsed < 50, f"took {elapsed:.0f} s: stopped by the ranks' own timeouts, not the watchdog"
    summary = json.loads((results / run_id / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("rank 1 made no progress")
    assert not (REMOTE_BASE / run_id).exists(), "remote run and heartbeat directories must be removed"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_a_sigstopped_rank_on_another_host_is_named_by_its_relayed_pulse(sshd, known_hosts, tmp_path, run_ids):
    """Pulses travel with the beats: rank 1, SIGSTOPped on its host inside the collective rank 0 waits in, is
    named for its relayed pulse going stale. By beats alone rank 0 was named: the relay stamps both ranks' last
    beats in the same read, rank 0's first."""
    results, run_id = tmp_path / "results", run_ids("sigstop")
    # the ranks on the "hosts" get their login environment: a PYTHONPATH that points at the code under test (a
    # worktree beside the installed checkout) goes with them through the interpreter they run
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(os.environ.get('PYTHONPATH', ''))} exec "
                      f"{shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "hipress_cli.app", "run", "mlp", "--iters", "100000", "--hosts",
                             "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts), "--stall-timeout", "8",
                             "--remote-python", str(python),
                             "--results", str(results), "--run-id", run_id], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    events = results / run_id / "events.jsonl"

    def rank_pids() -> list[int]:
        assert wait_until(lambda: events.exists() and events.read_text().count('"iteration"') >= 3, 120), (
            proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        return json.loads(events.read_text().splitlines()[0])["pids"]

    # relayed beats land the stop less often (both stamped in one read a second apart): on CI's loaded two
    # cores 90 s of tries once found no moment where they blame rank 0, so this test tries longer
    pids, stopped, err = stop_rank_1_and_follow(proc, rank_pids, settle_s=2.5, timeout_s=90, within_s=240)
    err = _text(err)
    assert proc.returncode == 1, err
    assert "rank 1 made no progress for" in err and "no sign of life from it for" in err, (stopped, err)
    assert "its host stopped answering (down, or its link), or its process is not running (stopped by SIGSTOP" in err
    assert not (REMOTE_BASE / run_id).exists(), "remote run and heartbeat directories must be removed"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def _files(run_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(run_dir).as_posix(): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_resume_refused_for_a_hosts_leftover_directory_leaves_the_run_as_it_was(sshd, known_hosts, tmp_path,
                                                                                    run_ids):
    """--resume --hosts where a host still holds the directory an earlier job of the run left unfetched: the job
    refused to start there only after the resume had rewound events.jsonl to the checkpoint (the `end` dropped,
    a `resume` added), written config.json and summary.json. Now the hosts are asked before anything is
    written: exit 2 naming the directory, and every file of the run as it was. (This leftover has no record of
    what its job was sent, as an older hipress leaves it: a resume cannot merge it, see the test below.)"""
    run_dir = tmp_path / run_ids("left")
    finished_run(run_dir)
    left = REMOTE_BASE / run_dir.name / "1-127.0.0.2"
    (left / "checkpoint").mkdir(parents=True)
    (left / "checkpoint" / "rank-1.pt").write_bytes(b"newest")
    before = _files(run_dir)
    r = _hipress(["run", "--resume", str(run_dir), "--iters", "5", "--hosts", "127.0.0.1:1,127.0.0.2:1",
                  *_ssh_args(sshd, known_hosts)])
    assert r.returncode == 2, r.stderr
    text = _text(r.stderr)
    assert f"127.0.0.2: {left} is there already, left by an earlier job of run {run_dir.name!r}" in text, text
    assert "It was not fetched: it has no record of what its job was sent" in text, text
    assert _files(run_dir) == before
    assert (left / "checkpoint" / "rank-1.pt").read_bytes() == b"newest", "the leftover must be kept"
    assert not (REMOTE_BASE / run_dir.name / "0-127.0.0.1").exists()
    assert wait_until(lambda: not sshd_children(sshd), 10)


def _remote_checkpoint(wdir: Path, rank: int) -> int | None:
    try:
        return _checkpoint_iteration(wdir, rank)
    except Exception:  # noqa: BLE001 - not written yet
        return None


def _running_in(top: Path) -> list[int]:
    """PIDs of the processes whose working directory is under ``top`` (a job's proxies and ranks on its hosts)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if cwd == top or top in cwd.parents:
            found.append(int(pid))
    return found


def test_a_resume_on_hosts_fetches_what_a_killed_launcher_left_there(sshd, known_hosts, tmp_path, run_ids):
    """A launcher killed with SIGKILL leaves each host's run directory, with the job's newest checkpoints, on the
    host. `--resume --hosts` was refused until the user copied them by hand (and, once the directories were
    removed, started from whatever older checkpoint was here: here, none). Now the resume fetches them, by the
    merge rules of a job's own end, removes them there, says so, and continues from their checkpoint."""
    run_id = run_ids("killed")
    results = tmp_path / "results"
    run_dir, base = results / run_id, REMOTE_BASE / run_id
    hosts = ["--hosts", "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts)]
    proc = subprocess.Popen([sys.executable, "-m", "hipress_cli.app", "run", "mlp", "--iters", "8",
                             "--checkpoint-every", "2", *hosts, "--results", str(results), "--run-id", run_id],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "HIPRESS_FAULT": "1:5:hang"})  # rank 1 hangs after checkpoint 4
    try:
        wdirs = [base / "0-127.0.0.1", base / "1-127.0.0.2"]
        assert wait_until(lambda: [_remote_checkpoint(w, r) for r, w in enumerate(wdirs)] == [4, 4], 240), \
            "the job never checkpointed iteration 4 on its hosts"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert wait_until(lambda: not _running_in(base), 30), "the hosts' guards did not end the job"
        # and its sessions, with them the programs holding its directories' locks (remote_scripts.HOLDER): until
        # they are gone, the resume is told a job runs there
        assert wait_until(lambda: not sshd_children(sshd), 30), "the killed launcher's sessions did not end"
        assert not (run_dir / "checkpoint").exists(), "the killed launcher fetched nothing"
        r = _hipress(["run", "--resume", str(run_dir), *hosts, "--json"])
        assert r.returncode == 0, r.stderr
        text = _text(r.stderr)
        for w in wdirs:
            assert f"fetched the results an earlier job of this run left unfetched on {w.name[2:]}: {w}" in text, text
        summary = json.loads(r.stdout)
        assert (summary["status"], summary["iterations"]) == ("ok", 9), summary
        events = _events(run_dir)
        assert ("resume", 4) in events, events
        assert [i for e, i in events if e == "iteration"] == list(range(9)), events
        assert not base.exists(), "the fetched directories must be removed from the hosts"
        assert not (run_dir / "hosts").exists(), "nothing of the leftovers conflicts with this side's files"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert wait_until(lambda: not sshd_children(sshd), 10)
