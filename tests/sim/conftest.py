from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def experiments_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "experiments" / "sosp21"
