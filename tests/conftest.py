"""Shared fixtures. Folder-specific fixtures live in tests/<folder>/conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gapforge.config import GapforgeConfig, load_config

TAU2_EXTRA = "extra 'tau2' not installed (pip install -e .[tau2]); CI installs it"
POSTGRES_EXTRA = "extra 'postgres' not installed (pip install -e .[postgres]); CI installs it"


@pytest.fixture(autouse=True)
def _fresh_endpoint_breakers():
    """Endpoint circuit breakers are process-wide per base URL: a local port reused by a later
    test's fake server must not inherit an earlier test's outage."""
    from gapforge.envs.breaker import reset_breakers

    reset_breakers()
    yield


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def config(workspace: Path) -> GapforgeConfig:
    return load_config(None, [f"workspace={workspace}"], environ={})


def docker_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def docker_client():
    if not docker_available():
        pytest.skip("no Docker daemon reachable (CI starts one; locally: start dockerd)")
    import docker

    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(scope="session")
def postgres_url() -> str:
    import importlib.util

    if importlib.util.find_spec("psycopg") is None:
        pytest.skip(POSTGRES_EXTRA)
    url = os.environ.get("GAPFORGE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("GAPFORGE_TEST_POSTGRES_URL not set (CI starts PostgreSQL and sets it)")
    return url


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen-architecture model built offline (random weights, tokenizer trained on the spot)."""
    from gapforge.serving.tiny_model import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-model")
    build_tiny_model(path, seed=0)
    return path


@pytest.fixture(scope="session")
def qwen3_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with Qwen3's real stock chat template (TRL's copy, read from the installed package):
    its tokenizer has Qwen's control tokens and the <think> / <tool_call> / <tool_response> tags."""
    from gapforge.serving.chat_format import stock_template
    from gapforge.serving.tiny_model import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-qwen3")
    build_tiny_model(path, seed=0, template=stock_template("qwen3"))
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests get the markers of tests/markers.py (a service's fixture -> its marker; the slow list).
    Tests marked `tau2` / `postgres` skip with a reason when that extra is absent (a
    `pip install -e .[dev]` alone); CI installs every extra, so nothing is skipped there."""
    import importlib.util

    from markers import markers_for

    missing = {
        mark: reason
        for mark, module, reason in (("tau2", "tau2", TAU2_EXTRA), ("postgres", "psycopg", POSTGRES_EXTRA))
        if importlib.util.find_spec(module) is None
    }
    for item in items:
        for mark in sorted(markers_for(item.nodeid, getattr(item, "fixturenames", ()))):
            item.add_marker(mark)
        for mark, reason in missing.items():
            if mark in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
