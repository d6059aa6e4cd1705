""".ci/gpu-check's bookkeeping, with every command it runs stubbed: its exit code must say whether the
run passed, because a device call reports only that code and the files under $OUT, and a rare GPU
session that reads 0 would take a failed or deadline-cut run for a passed one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "gpu-check"
STUBS = ("python3", "nvidia-smi", "hipress", "mpiexec")


def _stub_bin(tmp_path: Path, failing: tuple[str, ...] = ()) -> Path:
    """A folder of stand-ins for the commands gpu-check runs: each reads its input and exits 0
    (hipress prints an empty JSON document, python3 names the stub mpiexec as hipress's, mpiexec
    logs its arguments to mpiexec.txt), or 3 for the names in ``failing``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    outputs = {
        "hipress": "echo '{}'",
        "python3": f'case "$*" in *mpiexec_path*) echo {bin_dir / "mpiexec"} ;; esac',
        "mpiexec": f'echo "$*" >>{tmp_path / "mpiexec.txt"}',
    }
    for name in STUBS:
        out = outputs.get(name, ":")
        rc = 3 if name in failing else 0
        path = bin_dir / name
        path.write_text(f"#!/usr/bin/env bash\ncat >/dev/null\n{out}\nexit {rc}\n")
        path.chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, failing: tuple[str, ...] = (), deadline: int = 120) -> tuple[int, list[dict]]:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "DEADLINE": str(deadline),
           "PATH": f"{_stub_bin(tmp_path, failing)}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", str(SCRIPT), "gpu"], env=env, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    return r.returncode, steps


@pytest.mark.timeout(200)
def test_exit_code_zero_when_every_step_passed(tmp_path):
    rc, steps = _run(tmp_path)
    assert [s["rc"] for s in steps] == [0] * len(steps) and len(steps) == 7, steps
    assert rc == 0


@pytest.mark.timeout(200)
def test_exit_code_one_when_a_step_failed(tmp_path):
    rc, steps = _run(tmp_path, failing=("nvidia-smi",))
    assert steps[0] == {**steps[0], "step": "nvidia-smi", "rc": 3}
    assert rc == 1


@pytest.mark.timeout(200)
def test_exit_code_one_when_the_deadline_cut_the_steps(tmp_path):
    rc, steps = _run(tmp_path, deadline=10)
    assert {s["rc"] for s in steps} == {None}
    assert rc == 1


@pytest.mark.timeout(200)
def test_earlier_runs_lines_do_not_decide_the_exit_code(tmp_path):
    """Here $OUT defaults to ./gpu-check-out, which outlives a run: only this run's steps count."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "steps.jsonl").write_text('{"step": "old", "rc": 1, "seconds": 0.1, "limit": 9}\n')
    rc, steps = _run(tmp_path)
    assert steps[0]["step"] == "old" and len(steps) == 8
    assert rc == 0


@pytest.mark.timeout(200)
def test_hipress_runs_from_the_source_tree_when_the_install_did_not_take(tmp_path):
    """An image whose pip cannot install this tree must not cost the device call: the checks then run
    hipress from the source tree (on PYTHONPATH), and steps.jsonl says so."""
    bin_dir = _stub_bin(tmp_path)
    calls = tmp_path / "calls.txt"
    (bin_dir / "python3").write_text(
        "#!/usr/bin/env bash\ncat >/dev/null\n"
        f'echo "$PYTHONPATH|$*" >>{calls}\n'
        'case "$*" in *"import hipress"*) exit 1 ;; esac\n'
    )
    (bin_dir / "hipress").unlink()
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "DEADLINE": "120", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["bash", str(SCRIPT), "gpu"], env=env, capture_output=True, text=True, timeout=120,
                   stdin=subprocess.DEVNULL)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert "hipress from the source tree" in [s["step"] for s in steps]
    bench = [line for line in calls.read_text().splitlines() if "bench compress" in line]
    assert bench and all("-m hipress_cli.app bench compress" in line for line in bench), bench
    src = Path(bench[0].split("|")[0].split(":")[0])
    assert (src / "hipress").resolve() == SCRIPT.parents[1] / "lib"
    assert (src / "hipress_cli").resolve() == SCRIPT.parents[1] / "hipress_cli"


@pytest.mark.timeout(200)
def test_mpi_says_hello_through_hipresss_own_mpiexec_before_the_checks(tmp_path):
    """Every MPI test and run needs mpiexec (the mpich wheel's, which the GPU image lacks): a step of
    its own names that failure, not forty failed tests."""
    rc, steps = _run(tmp_path, failing=("mpiexec",))
    names = [s["step"] for s in steps]
    assert names.index("mpi hello") == names.index("versions") + 1
    assert steps[names.index("mpi hello")]["rc"] == 3 and rc == 1
    assert (tmp_path / "mpiexec.txt").read_text().split() == ["-n", "2", "python3", "-m", "mpi4py.bench", "helloworld"]


def _install_calls(tmp_path: Path, wheels: tuple[str, ...]) -> tuple[list[str], list[dict], str]:
    """gpu-check's pip calls (python3's arguments, in order) with ``wheels`` (empty files) carried in
    GPU_WHEELS, its steps, and its log."""
    bin_dir = _stub_bin(tmp_path)
    calls = tmp_path / "calls.txt"
    (bin_dir / "python3").write_text(
        "#!/usr/bin/env bash\ncat >/dev/null\n"
        f'case "$*" in *"-m pip"*) echo "$*" >>{calls} ;; *mpiexec_path*) echo {bin_dir / "mpiexec"} ;; esac\n'
    )
    carried = tmp_path / "wheels"
    carried.mkdir()
    for name in wheels:
        (carried / name).touch()
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "DEADLINE": "120", "GPU_WHEELS": str(carried),
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["bash", str(SCRIPT), "gpu"], env=env, capture_output=True, text=True, timeout=120,
                   stdin=subprocess.DEVNULL)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    return calls.read_text().splitlines(), steps, (out / "log.txt").read_text()


MPI4PY = "mpi4py-4.1.1-cp312-cp312-manylinux_2_17_x86_64.whl"
MPICH = "mpich-4.3.2-py3-none-manylinux_2_17_x86_64.whl"
LARK = "lark-1.2.2-py3-none-any.whl"


@pytest.mark.timeout(200)
def test_carried_mpi_wheels_replace_the_images_own_of_the_same_version(tmp_path):
    """The image has its own mpi4py (built for no MPI library), and pip keeps an installed package whose
    version equals a given wheel's: mpi4py and mpich are installed with --force-reinstall, so the carried
    MPI-ABI mpi4py and the mpich it loads are the ones the checks run, whatever the image's version."""
    calls, steps, _ = _install_calls(tmp_path, (MPI4PY, MPICH, LARK))
    assert {s["step"]: s["rc"] for s in steps}["install"] == 0, steps
    forced = [c for c in calls if "--force-reinstall" in c]
    assert len(forced) == 1, calls
    assert MPI4PY in forced[0] and MPICH in forced[0] and LARK not in forced[0], forced
    assert "--no-deps" in forced[0].split() and "--no-index" in forced[0].split()
    first = calls.index(forced[0])
    assert LARK in calls[first - 1] and "-e ." in calls[first + 1], calls  # after the rest, before hipress


@pytest.mark.timeout(200)
def test_carried_wheels_without_mpi4py_fail_the_install_step_saying_so(tmp_path):
    """A .gpu-wheels/ without the mpi4py wheel would leave the image's: the install step fails and says
    what to do, rather than the MPI steps failing later for a reason the log does not give."""
    _, steps, log = _install_calls(tmp_path, (MPICH, LARK))
    assert {s["step"]: s["rc"] for s in steps}["install"] == 1, steps
    assert "lacks the mpi4py or the mpich wheel: run bash .ci/gpu-wheels" in log
