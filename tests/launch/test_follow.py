"""How a job's end is handled, with stand-ins (no hosts): ``hipress.launch.runner.follow`` (how the reasons a
run ended reach its failure) and ``RemoteProcess.stop`` (how long a host that does not answer is asked)."""

from __future__ import annotations

from pathlib import Path

from hipress.launch import runner


class _Job:
    """A job that has ended with ``rc`` and whose ``stop`` could not fetch one host's results."""

    np = 2
    heartbeat_dir = None

    def __init__(self, rc: int) -> None:
        self.rc, self.returncode, self.unfetched = rc, None, []

    def poll(self) -> int:
        self.returncode = self.rc
        return self.rc

    def watch(self, pids: list[int]) -> None:
        pass

    def stop(self) -> None:
        self.unfetched.append("could not fetch the results from 10.77.0.2 (no answer in time); they stay there")
        if self.returncode == 0:
            self.returncode = 1

    def failure_message(self, run_dir: Path) -> str:
        return "rank 1 was killed by signal 9" if self.rc else "; ".join(self.unfetched)


def test_results_left_on_a_host_are_said_when_the_run_failed_for_another_reason(tmp_path):
    """A run stopped by a failure (a stall, a rank killed) whose stop then could not fetch a host's results
    (the host's link down) said only the first reason: the results left on the host were in output.log alone."""
    ended = runner.follow(_Job(1), tmp_path)
    assert (ended.status, ended.returncode) == ("failed", 1)
    assert ended.failure == ("rank 1 was killed by signal 9; could not fetch the results from 10.77.0.2 "
                             "(no answer in time); they stay there"), ended.failure


def test_a_run_that_only_could_not_fetch_says_that_once(tmp_path):
    ended = runner.follow(_Job(0), tmp_path)
    assert (ended.status, ended.returncode) == ("failed", 1)
    assert ended.failure == "could not fetch the results from 10.77.0.2 (no answer in time); they stay there"


def _stop_asking(monkeypatch, group_answers: bool) -> list[str]:
    """What ``RemoteProcess.stop`` asks a host whose job-wide TERM (``signal_job``) gets no answer."""
    from types import SimpleNamespace

    from hipress.launch import remote

    asked: list[str] = []
    monkeypatch.setattr(remote, "signal_job", lambda client, python, token, sig, timeout=15.0: asked.append(sig))

    def kill_group(client: object, pid: int, sig: str) -> bool:
        asked.append(f"group {sig}")
        return group_answers

    monkeypatch.setattr(remote, "kill_group", kill_group)
    proc = object.__new__(remote.RemoteProcess)
    proc.client = SimpleNamespace(get_transport=lambda: SimpleNamespace(is_active=lambda: True))
    proc.channel = SimpleNamespace(exit_status_ready=lambda: False, shutdown_write=lambda: None)
    proc.pid, proc.python, proc.token = 4242, "python3", "t0k"
    assert proc.stop(grace=0.0) is None
    return asked


def test_a_host_that_does_not_answer_the_term_is_not_asked_again(monkeypatch):
    """Stopping a job on a host whose link went down asked it three more times after the TERM went
    unanswered (KILL, then the count), each waiting its whole timeout: a minute more to stop the run."""
    assert _stop_asking(monkeypatch, group_answers=True) == ["group TERM", "TERM"]


def test_a_host_that_does_not_answer_the_group_term_is_not_asked_the_job_term(monkeypatch):
    """The process group's TERM went unanswered (the host froze after ``RemoteJob.stop``'s probe answered: up to
    2 x ``KILL_S``), and the job-wide TERM was asked all the same, waiting up to 2 x 15 s more on that host."""
    assert _stop_asking(monkeypatch, group_answers=False) == ["group TERM"]


def test_following_a_failed_start_of_a_resumed_run_replays_none_of_its_earlier_events(tmp_path, monkeypatch):
    """A start refused by the hosts returns a ``FailedStart``, which had no ``tail_from``: ``follow`` tailed
    ``events.jsonl`` from byte 0 and handed a resumed run's earlier events (their ``start`` naming processes long
    gone) to ``on_event`` as this job's. It now carries the files' sizes from when the start was tried."""
    import json

    from hipress.launch import remote

    class Refused:  # the hosts refuse the job (e.g. a held directory): what RemoteJob raises
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise remote.RemoteLaunchError("127.0.0.2: cannot prepare the run directory")

    monkeypatch.setattr(remote, "RemoteJob", Refused)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    earlier = [{"event": "start", "pids": [1, 2], "time": 1.0}, {"event": "end", "time": 2.0}]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in earlier))
    job = runner.start(2, ["true"], run_dir, runner.Where(cluster=object()), mirror=["events.jsonl"])
    assert isinstance(job, runner.FailedStart), job
    got: list[dict] = []
    ended = runner.follow(job, run_dir, got.append, events="events.jsonl", stall_timeout_s=0)
    assert ended.status == "failed" and "cannot prepare the run directory" in ended.failure, ended
    assert got == [], f"the earlier part's events were replayed as this job's: {got}"
