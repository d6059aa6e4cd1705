"""Multi-"host" MPI jobs through a real sshd: 127.0.0.1 and 127.0.0.2 are both this machine.

Each host's ranks run in their own remote directory (not the local run directory), so results can
only arrive here by SFTP; MPI sees two nodes (one per host name), so ranks on different "hosts"
talk through the network module, as across real machines.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hipress.launch.hosts import parse_hosts
from hipress.launch.preflight import PreflightError, check_host
from hipress.launch.remote import Cluster, RemoteJob, RemoteLaunchError, fetch_leftovers, find_leftovers, launch_hosts
from hipress.launch.sftp import manifest

from .sshd import ipv6_loopback, job_processes, sshd_children, wait_until

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
PROG = str(Path(__file__).with_name("rank_prog.py"))
REPO = Path(__file__).resolve().parents[2]


def _run_dir(tmp_path: Path, name: str = "run-1") -> Path:
    d = tmp_path / "results" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model": "test", "np": 3}))
    return d


def test_two_host_run_results_arrive_by_sftp(sshd, ssh_opts, tmp_path):
    run_dir = _run_dir(tmp_path)
    marker = "hipress-test-pwned"
    remote = tmp_path / f"remote dir;touch {marker};$(touch {marker})'\"`touch {marker}`"
    lines: list[str] = []
    res = launch_hosts(parse_hosts("127.0.0.1:2,127.0.0.2:1"), [sys.executable, PROG, "ok"], ssh_opts,
                       {"HIPRESS_TEST_VALUE": "a value; $(not expanded)"}, run_dir, remote_dir=str(remote),
                       on_line=lines.append, mirror=["events.jsonl"], timeout=120)
    assert res.ok, f"{res.failure}\n" + "\n".join(res.output_tail)
    ranks = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(3)]
    # every rank ran where it should, in its host's own directory, with the uploaded config
    assert [Path(r["cwd"]).name for r in ranks] == ["0-127.0.0.1", "0-127.0.0.1", "1-127.0.0.2"]
    assert all(Path(r["cwd"]).parent == remote / "run-1" for r in ranks)
    assert all(r["config"] == {"model": "test", "np": 3} and r["sum"] == 6 and r["size"] == 3 for r in ranks)
    assert [r["local_ranks"] for r in ranks] == [2, 2, 1], "MPI should see two nodes"
    assert all(r["env"] == "a value; $(not expanded)" for r in ranks)
    assert not any("not expanded" in line for line in lines), "environment values must not be logged"
    assert json.loads((run_dir / "summary.json").read_text()) == {"status": "ok", "sum": 6}
    assert len((run_dir / "events.jsonl").read_text().splitlines()) == 3  # mirrored, then not duplicated
    assert res.conflicts == []
    # logs stream back prefixed by host and rank
    assert "[127.0.0.1 r0] hello from rank 0 of 3 sum 6" in lines
    assert "[127.0.0.1 r1] hello from rank 1 of 3 sum 6" in lines
    assert "[127.0.0.2 r2] hello from rank 2 of 3 sum 6" in lines
    # the remote directories are gone, nothing ran a metacharacter, nothing is left running
    assert not (remote / "run-1").exists()
    assert not any((p / marker).exists() for p in (Path.home(), tmp_path, remote.parent, Path("/")))
    assert wait_until(lambda: not job_processes(ranks[0]["job"]), 10)
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_crashed_rank_stops_every_host(sshd, ssh_opts, tmp_path):
    run_dir = _run_dir(tmp_path, "run-crash")
    t0 = time.monotonic()
    res = launch_hosts(parse_hosts("127.0.0.1:1,127.0.0.2:1"), [sys.executable, PROG, "crash"], ssh_opts, {},
                       run_dir, remote_dir=str(tmp_path / "remote"), on_line=lambda _: None, timeout=120)
    assert time.monotonic() - t0 < 60
    assert res.returncode != 0 and not res.ok
    assert "127.0.0.2" in res.failure and "signal 9" in res.failure, res.failure
    token = json.loads((run_dir / "rank0.json").read_text())["job"]  # partial results were still fetched
    assert wait_until(lambda: not job_processes(token), 10), "ranks or proxies left running"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_timeout_stops_every_host(sshd, ssh_opts, tmp_path):
    run_dir = _run_dir(tmp_path, "run-timeout")
    res = launch_hosts(parse_hosts("127.0.0.1:1,127.0.0.2:1"), [sys.executable, PROG, "hang"], ssh_opts, {},
                       run_dir, remote_dir=str(tmp_path / "remote"), on_line=lambda _: None, timeout=6)
    assert res.timed_out and res.returncode == 124 and "timed out" in res.failure
    token = json.loads((run_dir / "rank1.json").read_text())["job"]
    assert wait_until(lambda: not job_processes(token), 10)
    assert wait_until(lambda: not sshd_children(sshd), 10)


def _start_driver(sshd, ssh_opts, tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path, list[str]]:
    """``launch_hosts`` of a hanging job in a process of its own; returns once both ranks are ready."""
    run_dir = _run_dir(tmp_path, name)
    cfg = {"port": sshd.port, "key": str(sshd.client_key), "known_hosts": str(ssh_opts.known_hosts),
           "hosts": "127.0.0.1:1,127.0.0.2:1", "argv": [sys.executable, PROG, "hang"], "run_dir": str(run_dir),
           "remote_dir": str(tmp_path / "remote")}
    proc = subprocess.Popen([sys.executable, "-m", "tests.launch.driver", json.dumps(cfg)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ready, out = 0, []
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        out.append(line)
        ready += "] ready" in line
        if ready == 2 or time.monotonic() > deadline:
            break
    assert ready == 2, "".join(out)
    return proc, run_dir, out


def test_ctrl_c_stops_every_host(sshd, ssh_opts, tmp_path):
    """SIGINT to the launcher's process group, as a terminal's Ctrl-C: exit 130, nothing left anywhere."""
    proc, run_dir, out = _start_driver(sshd, ssh_opts, tmp_path, "run-int")
    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, "".join(out) + rest
    assert '"interrupted": true' in rest
    token = json.loads((run_dir / "rank0.json").read_text())["job"]  # fetched after the interrupt
    assert wait_until(lambda: not job_processes(token), 10)
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_killed_launcher_leaves_nothing_running(sshd, ssh_opts, tmp_path):
    """SIGKILL of the launcher (no cleanup possible here): the hosts' guards end the job themselves."""
    proc, _, _ = _start_driver(sshd, ssh_opts, tmp_path, "run-kill")
    wdir = next((tmp_path / "remote" / "run-kill").glob("0-*"))
    token = json.loads((wdir / "rank0.json").read_text())["job"]
    assert len(job_processes(token)) >= 4  # mpiexec here; a proxy and a rank on each host
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert wait_until(lambda: not job_processes(token), 15), "ranks, proxies or mpiexec outlived the launcher"
    assert wait_until(lambda: not sshd_children(sshd), 10)
    # its hosts' directories stay (results not fetched), and their locks went with the launcher: the next job of
    # the run is told they are leftovers, not a job running now
    cluster = Cluster.connect(parse_hosts("127.0.0.1:1,127.0.0.2:1"), ssh_opts)
    with pytest.raises(RemoteLaunchError, match=f"{wdir} is there already, left by an earlier job of run 'run-kill'"):
        RemoteJob(cluster, [sys.executable, PROG], run_dir=tmp_path / "results" / "run-kill",
                  remote_dir=str(tmp_path / "remote"))
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_preflight_names_every_bad_host_and_starts_nothing(sshd, ssh_opts, tmp_path):
    run_dir = _run_dir(tmp_path, "run-pre")
    before = sorted(run_dir.iterdir())
    t0 = time.monotonic()
    with pytest.raises(PreflightError) as info:
        launch_hosts(parse_hosts("127.0.0.1:1,127.0.0.3:1,127.0.0.2:64"), [sys.executable, PROG], ssh_opts, {},
                     run_dir, remote_dir=str(tmp_path / "remote"), on_line=lambda _: None)
    assert time.monotonic() - t0 < ssh_opts.connect_timeout + 5
    msg = str(info.value)
    assert "2 of 3 host(s) not ready" in msg
    assert "127.0.0.3" in msg and "refused" in msg
    assert "127.0.0.2: 64 slots asked but only" in msg
    assert sorted(run_dir.iterdir()) == before and not (tmp_path / "remote").exists()
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_preflight_reports_version_mismatch(sshd, ssh_opts, tmp_path):
    """A remote interpreter of another Python and hipress version is named, with both versions."""
    fake = tmp_path / "python-other"
    fake.write_text('#!/bin/sh\necho \'HIPRESS-PROBE {"python": "3.9.1", "hipress": "0.0.1", "cpus": 1, '
                    '"missing": ["/opt/mpi/bin/hydra_pmi_proxy"], "ifaces": ["lo"]}\'\n')
    fake.chmod(0o755)
    host = parse_hosts("127.0.0.2:2")[0]
    r = check_host(host, ssh_opts.with_(python=str(fake)), interface="ib0")
    assert r.reachable and r.authenticated and not r.ok
    text = "; ".join(r.problems)
    assert "Python 3.9.1 there" in text and "hipress 0.0.1 there" in text
    assert "2 slots asked but only 1" in text and "hydra_pmi_proxy is missing" in text
    assert "no network interface 'ib0'" in text
    r = check_host(host, ssh_opts.with_(python=str(tmp_path / "nope")))
    assert r.error and "not found" in r.error and "--remote-python" in r.error


def test_bad_run_id_is_refused_before_anything_starts(sshd, ssh_opts, tmp_path):
    cluster = Cluster.connect(parse_hosts("127.0.0.1"), ssh_opts)
    with pytest.raises(RemoteLaunchError, match="run id"):
        RemoteJob(cluster, [sys.executable, PROG], run_dir=tmp_path / "bad;name", remote_dir=str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_a_host_directory_left_by_a_killed_launcher_is_kept_and_explained(sshd, ssh_opts, tmp_path):
    """A launcher killed with SIGKILL (or that lost a host) leaves the host's run directory, with the job's newest
    checkpoints, unfetched. The next job of that run id (a ``--resume``, which cannot change it) was refused with
    "choose another run id"; now the message says what the directory is, that it is kept, and how to fetch and
    remove it, and the directory is not touched."""
    run_dir = _run_dir(tmp_path, "run-left")
    remote = tmp_path / "remote"
    left = remote / "run-left" / "1-127.0.0.2"
    (left / "checkpoint").mkdir(parents=True)
    (left / "checkpoint" / "rank-1.pt").write_bytes(b"newest")
    cluster = Cluster.connect(parse_hosts("127.0.0.1:1,127.0.0.2:1"), ssh_opts)
    with pytest.raises(RemoteLaunchError) as e:
        RemoteJob(cluster, [sys.executable, PROG], run_dir=run_dir, remote_dir=str(remote))
    text = str(e.value)
    assert text.startswith(f"127.0.0.2: {left} is there already, left by an earlier job of run 'run-left'"), text
    assert "choose another run id" not in text
    user, port = ssh_opts.username, ssh_opts.port
    assert f"`scp -r -P {port} {user}@127.0.0.2:{left}/checkpoint {run_dir}/`" in text, text
    assert f"`ssh -p {port} {user}@127.0.0.2 'rm -r {left}'`" in text, text
    assert (left / "checkpoint" / "rank-1.pt").read_bytes() == b"newest", "the leftover must be kept"
    assert not (remote / "run-left" / "0-127.0.0.1").exists(), "the other host's fresh directory is removed"
    assert [p.name for p in (remote / "run-left").iterdir()] == ["1-127.0.0.2"], "no lock file left beside them"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_results_that_could_not_be_fetched_stay_on_their_host(sshd, ssh_opts, tmp_path, monkeypatch):
    """A host whose results cannot be fetched (its link went down: paramiko's bare ``socket.timeout()``) had
    its directory removed right after, the results lost, and the reason printed empty ("could not fetch the
    results from HOST: "). Now the directory stays, and the message says why and where it is."""
    import hipress.launch.sftp as sftp_mod

    real = sftp_mod.collect

    def collect(sftp, wdir, run_dir, label, sent):
        if label.startswith("1-"):
            raise TimeoutError()
        return real(sftp, wdir, run_dir, label, sent)

    monkeypatch.setattr(sftp_mod, "collect", collect)
    run_dir = _run_dir(tmp_path, "run-unfetched")
    lines: list[str] = []
    res = launch_hosts(parse_hosts("127.0.0.1:1,127.0.0.2:1"), [sys.executable, PROG], ssh_opts, {}, run_dir,
                       remote_dir=str(tmp_path / "remote"), on_line=lines.append, timeout=120)
    left = tmp_path / "remote" / "run-unfetched" / "1-127.0.0.2"
    assert not res.ok
    assert res.failure == (f"could not fetch the results from 127.0.0.2 (no answer in time: is the host or its link "
                           f"down?); they stay there, in {left}: copy them into {run_dir} once the host answers")
    assert f"[hipress] {res.failure}" in lines
    assert (left / "rank1.json").is_file(), "results not fetched must not be removed from their host"
    assert (run_dir / "rank0.json").is_file() and not (tmp_path / "remote" / "run-unfetched" / "0-127.0.0.1").exists()
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_interface_sets_the_mpi_transport(sshd, ssh_opts, tmp_path):
    run_dir = _run_dir(tmp_path, "run-iface")
    res = launch_hosts(parse_hosts("127.0.0.1,127.0.0.2"), [sys.executable, PROG], ssh_opts, {}, run_dir,
                       interface="lo", remote_dir=str(tmp_path / "remote"), on_line=lambda _: None, timeout=120)
    assert res.ok, res.failure
    for r in range(2):
        seen = json.loads((run_dir / f"rank{r}.json").read_text())
        assert (seen["sum"], seen["fi_tcp_iface"], seen["netmod"]) == (3, "lo", "ofi")
    with pytest.raises(PreflightError, match="no network interface 'nosuch0'"):
        launch_hosts(parse_hosts("127.0.0.1"), [sys.executable, PROG], ssh_opts, {}, run_dir, interface="nosuch0")
    with pytest.raises(RemoteLaunchError, match="not a network interface name"):
        launch_hosts(parse_hosts("127.0.0.1"), [sys.executable, PROG], ssh_opts, {}, run_dir, interface="lo;id")


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback (::1) here")
def test_ipv6_host(sshd, ssh_opts, tmp_path):
    run_dir = _run_dir(tmp_path, "run-v6")
    lines: list[str] = []
    res = launch_hosts(parse_hosts("[::1]:1,127.0.0.2:1"), [sys.executable, PROG], ssh_opts, {}, run_dir,
                       remote_dir=str(tmp_path / "remote"), on_line=lines.append, timeout=120)
    assert res.ok, res.failure
    assert Path(json.loads((run_dir / "rank0.json").read_text())["cwd"]).name == "0-__1"
    assert "[::1 r0] hello from rank 0 of 2 sum 3" in lines


def test_two_launchers_of_one_run_id_never_share_a_hosts_directory(sshd, ssh_opts, tmp_path, monkeypatch):
    """The local run lock guards one results directory; two launchers of the same run id into different ones
    (or from two machines) meet only on the hosts, in ``<remote_dir>/<run-id>/<i>-<host>``. Each checked that
    the directory was not there and then made it (accepting one made meanwhile): when the other launcher made
    it in between, both jobs ran in it, the second's config.json replaced the first's, and the second's stop
    removed the directory under the running first job. Here the first launcher (a real process, its job
    running) makes the directory exactly in that gap; the second is refused and the first's files stay. The
    refusal says the directory is a running job's (the first holds its lock on the host), not a leftover to
    remove."""
    import threading

    import hipress.launch.remote as remote_mod

    remote = tmp_path / "remote"
    first = _run_dir(tmp_path / "a", "run-race")
    (first / "config.json").write_text(json.dumps({"launcher": "first"}))
    second = _run_dir(tmp_path / "b", "run-race")
    (second / "config.json").write_text(json.dumps({"launcher": "second"}))
    cfg = {"port": sshd.port, "key": str(sshd.client_key), "known_hosts": str(ssh_opts.known_hosts),
           "hosts": "127.0.0.1:1", "argv": [sys.executable, PROG, "hang"], "run_dir": str(first),
           "remote_dir": str(remote)}
    started: list[subprocess.Popen] = []
    once = threading.Lock()

    def start_first_launcher() -> None:
        """The first launcher's whole start, run to its ranks' "ready" line."""
        proc = subprocess.Popen([sys.executable, "-m", "tests.launch.driver", json.dumps(cfg)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        started.append(proc)
        assert proc.stdout is not None
        out = []
        for line in proc.stdout:
            out.append(line)
            if "] ready" in line:
                return
        raise AssertionError("the first launcher did not start:\n" + "".join(out))

    real_makedirs = remote_mod.sftp_dir.makedirs

    def makedirs(sftp, path):  # the second launcher, between its look at the host and its own mkdir
        with once:
            if not started:
                start_first_launcher()
        return real_makedirs(sftp, path)

    monkeypatch.setattr(remote_mod.sftp_dir, "makedirs", makedirs)
    wdir = remote / "run-race" / "0-127.0.0.1"
    job = None
    try:
        cluster = Cluster.connect(parse_hosts("127.0.0.1:1"), ssh_opts)
        with pytest.raises(RemoteLaunchError, match=f"{wdir} is held by another launcher of run 'run-race'"):
            job = RemoteJob(cluster, [sys.executable, PROG, "hang"], run_dir=second, remote_dir=str(remote),
                            on_line=lambda _: None)
        assert json.loads((wdir / "config.json").read_text()) == {"launcher": "first"}
        assert json.loads((wdir / "rank0.json").read_text())["config"] == {"launcher": "first"}
        assert not (second / "rank0.json").exists()
    finally:
        if job is not None:  # started in the first job's directory (what the claim prevents): stop it
            job.stop(collect=False)
        for proc in started:
            os.killpg(proc.pid, signal.SIGINT)
            rest, _ = proc.communicate(timeout=60)
    assert started and started[0].returncode == 130, rest
    assert json.loads((first / "rank0.json").read_text())["config"] == {"launcher": "first"}
    assert not (remote / "run-race").exists()  # the first job fetched its results, removed its directory and lock
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_find_leftovers_tells_a_running_jobs_directory_from_a_leftover_and_leaves_both_alone(sshd, ssh_opts, tmp_path):
    """What ``hipress run`` asks the hosts before it writes anything (``find_leftovers``): a directory of the run
    id there already. It looked whether the directory existed, and called a directory that another launcher's
    job of the run id runs in now (another --results directory) 'left by an earlier job', whose message says
    to remove it with ``ssh ... rm -r``. The job's lock (``remote_scripts.HOLDER``) tells the two apart: the
    running job's is named in use, the true leftover as one; neither is touched, no lock file is left."""
    remote = tmp_path / "remote"
    running = _run_dir(tmp_path / "a", "run-look")
    (running / "config.json").write_text(json.dumps({"launcher": "first"}))
    job = RemoteJob(Cluster.connect(parse_hosts("127.0.0.1:1"), ssh_opts), [sys.executable, PROG, "hang"],
                    run_dir=running, remote_dir=str(remote), on_line=lambda _: None)
    busy, left = remote / "run-look" / "0-127.0.0.1", remote / "run-look" / "1-127.0.0.2"
    (left / "checkpoint").mkdir(parents=True)
    (left / "checkpoint" / "rank-1.pt").write_bytes(b"newest")
    try:
        with Cluster.connect(parse_hosts("127.0.0.1:1,127.0.0.2:1"), ssh_opts) as cluster:
            found = find_leftovers(cluster, _run_dir(tmp_path / "b", "run-look"), remote_dir=str(remote))
        assert len(found) == 2, found
        assert found[0].startswith(f"127.0.0.1: {busy} is held by another launcher of run 'run-look'"), found
        assert "rm -r" not in found[0], found
        assert found[1].startswith(f"127.0.0.2: {left} is there already, left by an earlier job of run 'run-look'")
        assert json.loads((busy / "config.json").read_text()) == {"launcher": "first"}
        assert job.poll() is None, "the running job must be left alone"
        assert sorted(p.name for p in (remote / "run-look").iterdir()) == [
            ".0-127.0.0.1.job.json", ".0-127.0.0.1.lock", "0-127.0.0.1", "1-127.0.0.2"]
    finally:
        job.stop()
    assert json.loads((running / "rank0.json").read_text())["config"] == {"launcher": "first"}
    with Cluster.connect(parse_hosts("127.0.0.1:1,127.0.0.2:1"), ssh_opts) as cluster:
        found = find_leftovers(cluster, running, remote_dir=str(remote))
    assert [m.split(" is ")[0] for m in found] == [f"127.0.0.2: {left}"], found
    assert [p.name for p in (remote / "run-look").iterdir()] == ["1-127.0.0.2"], "no lock file left beside it"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_a_leftover_is_fetched_only_when_its_job_record_says_it_is_sound(sshd, ssh_opts, tmp_path):
    """``fetch_leftovers`` (what ``--resume --hosts`` does first) merges a host's leftover directory by the rules
    of a job's end, against the record of what that job sent, and removes it; it leaves it where it is, saying
    why, when its job's processes still run there, the run directory had a later job since (config.json is
    not the one sent), or a job holds the directory's lock (``remote_scripts.HOLDER``: another launcher's job of
    the run id, in its setup before any process runs there): that one is named in use and never touched."""
    run_dir = _run_dir(tmp_path, "run-leftover")
    (run_dir / "checkpoint").mkdir()
    (run_dir / "checkpoint" / "rank-1.pt").write_bytes(b"older")
    remote = tmp_path / "remote"
    left = remote / "run-leftover" / "1-127.0.0.2"
    (left / "checkpoint").mkdir(parents=True)
    (left / "config.json").write_bytes((run_dir / "config.json").read_bytes())
    (left / "checkpoint" / "rank-1.pt").write_bytes(b"newest")
    record = left.parent / ".1-127.0.0.2.job.json"
    token = "leftover-test-token"
    record.write_text(json.dumps({"token": token, "sent": manifest(run_dir)}))
    hosts = parse_hosts("127.0.0.1:1,127.0.0.2:1")

    def fetch():
        with Cluster.connect(hosts, ssh_opts) as cluster:
            return fetch_leftovers(cluster, run_dir, remote_dir=str(remote))

    still = subprocess.Popen(["sleep", "120"], env={**os.environ, "HIPRESS_JOB": token})
    try:
        got = fetch()
    finally:
        still.kill()
        still.wait()
    assert got.fetched == [] and len(got.refused) == 1, got
    assert "It was not fetched: 1 process(es) of that job still run there" in got.refused[0], got.refused
    config = (run_dir / "config.json").read_bytes()
    (run_dir / "config.json").write_text(json.dumps({"model": "test", "np": 3, "resumed": 1}))  # a later job
    got = fetch()
    assert got.fetched == [] and "a later job of the run ran since" in got.refused[0], got.refused
    assert (left / "checkpoint" / "rank-1.pt").read_bytes() == b"newest", "a leftover not fetched must stay"
    lock = left.parent / ".1-127.0.0.2.lock"
    assert not lock.exists(), "a look leaves no lock file beside a directory it leaves"
    (run_dir / "config.json").write_bytes(config)
    with open(lock, "w") as held:  # the lock a job holds: one of the run id running there now
        fcntl.flock(held, fcntl.LOCK_EX)
        got = fetch()
    assert got.fetched == [] and len(got.refused) == 1, got
    # a lock held is all that is known (here no job runs at all: as a --resume fetching it holds it), not a job
    assert got.refused[0].startswith(f"127.0.0.2: {left} is held by another launcher of run 'run-leftover' "), got
    assert "running now" not in got.refused[0] and "a --resume fetching what an earlier job left" in got.refused[0]
    assert "rm -r" not in got.refused[0], got.refused
    assert (left / "checkpoint" / "rank-1.pt").read_bytes() == b"newest" and record.exists() and lock.exists()
    got = fetch()
    assert (got.fetched, got.refused, got.conflicts) == ([f"127.0.0.2: {left}"], [], []), got
    assert (run_dir / "checkpoint" / "rank-1.pt").read_bytes() == b"newest"
    assert not left.exists() and not record.exists() and not lock.exists(), "removed with the directory: its lock too"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_a_host_that_stopped_answering_does_not_hold_up_the_others_beats(sshd, ssh_opts, tmp_path, monkeypatch):
    """A dead host (frozen, or its link down) answers no SFTP read: each of the relay's reads of its beats waited
    its whole timeout (30 s) inside ``poll``, one after another, so the stall watchdog, which ``follow`` runs
    between polls, judged the other hosts' ranks half a minute late or worse. Here host 127.0.0.2's reads hang
    (for 40 s, as a dead host's do until they time out): polls must still return at once, and the beats
    of the host that answers must still reach the watchdog's directory."""
    import paramiko

    from hipress.launch import heartbeat

    run_dir = _run_dir(tmp_path, "run-dead")
    remote = tmp_path / "remote"
    beats = tmp_path / "beats"
    beats.mkdir()
    cluster = Cluster.connect(parse_hosts("127.0.0.1:1,127.0.0.2:1"), ssh_opts)
    dead = cluster.clients[1].get_transport()
    frozen, released = [], __import__("threading").Event()

    def hang_if_dead(real):
        def call(self, *args, **kwargs):
            if frozen and self.sock.get_transport() is dead:
                released.wait(40)
            return real(self, *args, **kwargs)
        return call

    for name in ("listdir", "open", "stat", "listdir_attr"):
        monkeypatch.setattr(paramiko.SFTPClient, name, hang_if_dead(getattr(paramiko.SFTPClient, name)))
    job = RemoteJob(cluster, [sys.executable, PROG, "hang"], run_dir=run_dir, remote_dir=str(remote),
                    on_line=lambda _: None, heartbeat_dir=beats)
    try:
        live = remote / "run-dead" / ".0-127.0.0.1.heartbeat"
        frozen.append(True)
        rank_0 = heartbeat.Heartbeat(0, str(live))  # rank 0 beats on the host that answers
        for it in (1, 2, 3):
            rank_0.beat("forward/backward", it)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                assert job.poll() is None
                took = time.monotonic() - t0
                assert took < 10, f"a poll waited {took:.0f} s for the host that does not answer"
                got = heartbeat.read_beats(beats).get(0)
                if got is not None and got.iteration == it:
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"rank 0's beat of iteration {it} never reached the watchdog")
    finally:
        released.set()
        job.stop()
    assert wait_until(lambda: not sshd_children(sshd), 30)


def test_fetch_leftovers_reads_a_hosts_job_record_once(sshd, ssh_opts, tmp_path, monkeypatch):
    """``fetch_leftovers`` read a leftover's job record twice: ``_unsound`` parsed it to judge the leftover, then
    the caller opened it again for what the job sent, one SFTP round trip to the host too many per leftover."""
    import paramiko

    run_dir = _run_dir(tmp_path, "run-once")
    remote = tmp_path / "remote"
    left = remote / "run-once" / "0-127.0.0.1"
    left.mkdir(parents=True)
    (left / "config.json").write_bytes((run_dir / "config.json").read_bytes())
    (left / "events.jsonl").write_text('{"event": "iteration", "iter": 0}\n')
    (left.parent / ".0-127.0.0.1.job.json").write_text(json.dumps({"token": "once-token", "sent": manifest(run_dir)}))
    opened: list[str] = []
    real_open = paramiko.SFTPClient.open

    def counting_open(self, filename, *args, **kwargs):
        opened.append(str(filename))
        return real_open(self, filename, *args, **kwargs)

    monkeypatch.setattr(paramiko.SFTPClient, "open", counting_open)
    with Cluster.connect(parse_hosts("127.0.0.1:1"), ssh_opts) as cluster:
        got = fetch_leftovers(cluster, run_dir, remote_dir=str(remote))
    assert (got.fetched, got.refused) == ([f"127.0.0.1: {left}"], []), got
    assert (run_dir / "events.jsonl").read_text() == '{"event": "iteration", "iter": 0}\n'
    assert [p for p in opened if p.endswith(".job.json")] == [str(left.parent / ".0-127.0.0.1.job.json")], opened
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_a_leftover_on_a_file_system_without_flock_is_kept_and_the_message_says_why_first(sshd, ssh_opts, tmp_path,
                                                                                          monkeypatch):
    """Without flock on the host (``remote_scripts.HOLDER`` answers ``left-unlocked``) a leftover is never fetched:
    a job of the run another launcher runs there now would look the same. The message called it "left by an
    earlier job" first and took that back in a clause after, then repeated the reason. It must say first that
    whose it is cannot be told, and then what to check and how to fetch it by hand."""
    from hipress.launch import remote as remote_mod

    run_dir = _run_dir(tmp_path, "run-nolock")
    remote = tmp_path / "remote"
    left = remote / "run-nolock" / "0-127.0.0.1"
    left.mkdir(parents=True)
    (left / "config.json").write_bytes((run_dir / "config.json").read_bytes())
    (left.parent / ".0-127.0.0.1.job.json").write_text(json.dumps({"token": "nolock", "sent": manifest(run_dir)}))
    real_hold_dir = remote_mod.hold_dir

    def no_flock(*args, **kwargs):  # what HOLDER answers where flock fails (OSError, not BlockingIOError)
        answer, hold = real_hold_dir(*args, **kwargs)
        return ("left-unlocked" if answer == "left" else answer), hold

    monkeypatch.setattr(remote_mod, "hold_dir", no_flock)
    with Cluster.connect(parse_hosts("127.0.0.1:1"), ssh_opts) as cluster:
        got = fetch_leftovers(cluster, run_dir, remote_dir=str(remote))
    assert got.fetched == [] and len(got.refused) == 1, got
    said = got.refused[0]
    assert said.startswith(f"127.0.0.1: {left} is there already, and whose it is cannot be told: this host's file "
                           "system has no flock"), said
    assert "hipress neither fetches nor removes it. If you started no such job" in said, said
    assert f"rm -r {left}" in said and "If you did, let that job end" in said, said
    assert said.count("flock") == 1, "the reason once"
    assert (left / "config.json").exists(), "kept"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_stop_leaves_a_host_that_does_not_answer_alone_after_one_bounded_ask(sshd, ssh_opts, tmp_path, monkeypatch):
    """A job stopped because a host died (frozen, its link down): ``stop`` asked that host as it asks one that
    answers, each request waiting its whole timeout one after another (the group TERM 5 s, the job's TERM 15 s,
    the SFTP fetch 30 s, the joins 3 s): the launcher exited about a minute after the watchdog named the host
    (measured: 56 s). Now every host is asked once, in parallel and for ``PROBE_S``, whether it answers; one
    that does not gets no signal and no SFTP request, and its results are said to stay there. Counted here:
    the sessions opened and SFTP requests sent to the dead host by ``stop`` (its watcher thread excepted)."""
    import threading

    import paramiko

    from hipress.launch import remote as remote_mod

    monkeypatch.setattr(remote_mod, "PROBE_S", 1.0)
    run_dir = _run_dir(tmp_path, "run-dead-stop")
    cluster = Cluster.connect(parse_hosts("127.0.0.1:1,127.0.0.2:1"), ssh_opts)
    dead = cluster.clients[1].get_transport()
    frozen, released = [], threading.Event()
    asked: list[str] = []

    def by_stop() -> bool:
        return not threading.current_thread().name.startswith("watch-")

    real_open_session = paramiko.Transport.open_session

    def open_session(self, *args, timeout=None, **kwargs):
        if frozen and self is dead:
            if by_stop():
                asked.append("session")
            released.wait(timeout or 10)  # a dead host answers no channel request: it times out
            raise paramiko.SSHException("Timeout opening channel.")
        return real_open_session(self, *args, timeout=timeout, **kwargs)

    monkeypatch.setattr(paramiko.Transport, "open_session", open_session)

    def hang_if_dead(name, real):
        def call(self, *args, **kwargs):
            if frozen and self.sock.get_transport() is dead:
                if by_stop():
                    asked.append(name)
                released.wait(10)
                raise TimeoutError()
            return real(self, *args, **kwargs)
        return call

    for name in ("listdir", "listdir_attr", "open", "stat", "lstat", "get", "remove", "rmdir"):
        monkeypatch.setattr(paramiko.SFTPClient, name, hang_if_dead(name, getattr(paramiko.SFTPClient, name)))
    lines: list[str] = []
    job = RemoteJob(cluster, [sys.executable, PROG, "hang"], run_dir=run_dir, remote_dir=str(tmp_path / "remote"),
                    on_line=lines.append)
    try:
        assert wait_until(lambda: sum("] ready" in line for line in lines) == 2, 60), lines
        frozen.append(True)
        job.stop()
    finally:
        released.set()
        job.stop()
    assert asked == ["session"], f"stop asked the dead host {asked} (one bounded probe is all it may)"
    assert len(job.unfetched) == 1 and job.unfetched[0].startswith(
        "could not fetch the results from 127.0.0.2 (it did not answer within 1 s"), job.unfetched
    assert any("127.0.0.2 did not answer within 1 s" in line for line in lines), lines
    assert (run_dir / "rank0.json").exists(), "the host that answers is still fetched"
    assert wait_until(lambda: not job_processes(job.token), 30), "the guards end the job once the connections close"
    assert wait_until(lambda: not sshd_children(sshd), 30)


@pytest.mark.parametrize("dies", ["before_prepare", "after_prepare"])
def test_a_failed_start_says_no_process_was_left_on_a_dead_host_it_started_none_on(sshd, ssh_opts, tmp_path,
                                                                                    monkeypatch, dies):
    """A start that failed with a dead host: ``stop`` said "<host> did not answer ...: its processes of this job
    are left to its guard" though the job had started no process there. Now it says so only of a host that had
    processes of the job; of another, that none was started there (and, if its directory was prepared, that
    the directory is left as it is, since a failed start fetches and says nothing else of it)."""
    import paramiko

    from hipress.launch import remote as remote_mod

    monkeypatch.setattr(remote_mod, "PROBE_S", 1.0)
    run_dir = _run_dir(tmp_path, f"run-dead-start-{dies}")
    cluster = Cluster.connect(parse_hosts("127.0.0.1:1,127.0.0.2:1"), ssh_opts)
    dead_client = cluster.clients[1]
    dead = dead_client.get_transport()
    frozen: list[bool] = [dies == "before_prepare"]
    real_open_session = paramiko.Transport.open_session
    real_open_sftp = paramiko.SSHClient.open_sftp

    def open_session(self, *args, **kwargs):
        if frozen[0] and self is dead:
            raise paramiko.SSHException("Timeout opening channel.")  # what a dead host's request ends in
        return real_open_session(self, *args, **kwargs)

    def open_sftp(self):
        if frozen[0] and self is dead_client:
            raise paramiko.SSHException("Timeout opening channel.")
        return real_open_sftp(self)

    monkeypatch.setattr(paramiko.Transport, "open_session", open_session)
    monkeypatch.setattr(paramiko.SSHClient, "open_sftp", open_sftp)
    real_start = RemoteJob._start

    def start(self, *args, **kwargs):  # the host dies once its directory is prepared; mpiexec cannot start
        frozen[0] = True
        self.cluster.mpiexec = str(tmp_path / "no-such-mpiexec")
        return real_start(self, *args, **kwargs)

    monkeypatch.setattr(RemoteJob, "_start", start)
    lines: list[str] = []
    with pytest.raises(RemoteLaunchError):
        RemoteJob(cluster, [sys.executable, PROG, "hang"], run_dir=run_dir, remote_dir=str(tmp_path / "remote"),
                  on_line=lines.append)
    said = [line for line in lines if "127.0.0.2 did not answer" in line]
    assert len(said) == 1, lines
    assert "left to its guard" not in said[0], said[0]
    assert "this job started no process there" in said[0], said[0]
    assert ("its directory there" in said[0]) == (dies == "after_prepare"), said[0]
    assert wait_until(lambda: not sshd_children(sshd), 30)
