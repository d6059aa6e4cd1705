"""Suite-wide settings: a hypothesis profile that fits a 2-core CI machine, OpenMP threads that sleep
when idle, the CPU for every process a test starts unless the test is marked ``gpu``, a terminal width
tests can set, and an address-space cap per process where there is no GPU (``ADDRESS_SPACE_CAP``)."""

import os

import pytest
from hypothesis import HealthCheck, settings

# pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment, which rich's consoles
# read once, on import, and keep: a test's own ``env={"COLUMNS": ...}`` would then change nothing.
# Without them rich asks at each print, as it does under a plain pytest.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

#: OpenMP's idle threads sleep rather than spin. GNU OpenMP (torch's intra-op pool, numba's ``omp`` kernel
#: layer) spins a waiting thread for a while by default: right for a process that owns its cores, but here
#: two xdist workers, their ranks and their subprocesses share 2 cores, and each spin takes CPU from a
#: process with work to do. Measured on tests/compress's kernel files with -n 2: 31 s of user CPU spinning,
#: 19 s sleeping, same 201 passes. Read by libgomp when it loads (torch's import, after this file), and
#: inherited by every process a test starts; a value set outside is kept. It changes when idle threads
#: wake, not what any kernel computes.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

#: The most address space a test process (and whatever it starts: ranks, sshd, mpiexec) may map on a
#: machine without NVIDIA devices. A fuzzed payload once made a pytest worker allocate 21 GB, and on this
#: 24 GiB machine the kernel's OOM killer took the worker: xdist said only "node down: Not properly
#: terminated". Under the cap the allocation fails in the test that made it, which then fails by name.
#: The largest real process of the suite, a rank of `hipress run vgg19`, maps 3.7 GB (VmPeak). CUDA maps
#: far more address space than it uses, so a machine with a GPU is left uncapped.
ADDRESS_SPACE_CAP = 8 << 30


def _cap_address_space() -> None:
    import glob
    import resource

    if glob.glob("/dev/nvidia[0-9]*"):
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > ADDRESS_SPACE_CAP:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, hard))


_cap_address_space()

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="session")
def _models_cache_of_the_session(tmp_path_factory):
    """The zoo's ready orders (``hipress.models.order_cache``) are kept in a directory of the session, not the
    user's ``~/.cache/hipress/models``: a test neither leaves files there nor reads what a run left."""
    from hipress.models.order_cache import CACHE_ENV

    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("models-cache"))
    yield
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


@pytest.fixture(autouse=True)
def _processes_see_no_gpu_unless_marked_gpu(request, monkeypatch):
    """``--device auto`` (every command's default) means CUDA wherever torch sees a GPU, and the
    ordinary suite's commands assume the CPU: two ranks on one GPU cannot run DDP on NCCL, and the
    exact figures they check are the CPU's. So the processes a test starts (``hipress ...``,
    ``mpiexec``) see no GPU, except in the tests marked ``gpu``, which are about the GPU. The test
    process itself keeps its view (torch fixed it at collection; in-process tests say which device
    they use)."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(autouse=True)
def _signal_dispositions_do_not_leak_between_tests():
    """A test that runs ``hipress run`` in-process and signals it leaves Ctrl-C ignored in this process
    (``launch.runner.signals_noted``: a CLI on its way out must not die half way through its summary),
    and every process a later test starts would inherit SIGINT ignored. Each test starts with what the
    session had."""
    import signal

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {s: signal.getsignal(s) for s in sigs}
    yield
    for s, h in before.items():
        if h is not None and signal.getsignal(s) is not h:
            signal.signal(s, h)


def _is_heavy(item: pytest.Item) -> bool:
    """Marked ``slow`` (seconds each) or ``mpi`` (real mpiexec jobs): the tests that take most of the time."""
    return item.get_closest_marker("slow") is not None or item.get_closest_marker("mpi") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heavy tests run first, the rest after in their usual order (a stable sort). pytest-xdist's
    ``load`` hands tests out in collection order, and in directory order most heavy ones (tests/train,
    tests/sync) came last: one worker could still run a minute-long job while the other had nothing left.
    First, they are dealt to both workers alternately, and the hundreds of sub-second tests at the end
    even out when the workers finish. The order is the same in every worker, as xdist requires."""
    items.sort(key=lambda item: not _is_heavy(item))
