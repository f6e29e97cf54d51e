"""One local Ray cluster for the whole test session (starting one costs ~10 s here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gapforge.store import Store

RAY_EXTRA = "extra 'ray' not installed (pip install -e .[ray]); CI installs it"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'r.db'}")
    yield s
    s.close()


@pytest.fixture(scope="session")
def ray_cluster():
    """A Ray head on loopback with 2 CPUs and a `docker` resource (this machine runs Docker)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip(RAY_EXTRA)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="gapforge", resources={"docker": 8})
    yield ray
    ray.shutdown()


from tests.sandbox.conftest import sandbox_config, sandbox_image  # noqa: E402,F401 - the sandbox's image and limits
