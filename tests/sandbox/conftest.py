"""Sandbox fixtures: the image (built once per session, offline), test-sized limits,
and a check that a test leaves no gapforge container behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gapforge.config import SandboxConfig
from gapforge.sandbox.docker_backend import list_containers

ENVS = Path(__file__).parent / "envs"
HOSTILE = Path(__file__).parent / "hostile"
TAG = "gapforge-sandbox:latest"


def gapforge_containers(client) -> list[str]:
    """gapforge containers owned by this test process (other processes may run their own)."""
    return [c["Id"] for c in list_containers(client, f"gapforge.pid={os.getpid()}")]


@pytest.fixture(scope="session")
def sandbox_image(docker_client) -> str:
    """The sandbox image tag; built offline (local Python, else debootstrap) unless current."""
    from gapforge.sandbox.errors import SandboxError
    from gapforge.sandbox.image import build_image, image_is_current

    if not image_is_current(docker_client, TAG):
        try:
            build_image(docker_client, TAG, method="local-python")
        except SandboxError:
            build_image(docker_client, TAG, method="debootstrap")
    return TAG


@pytest.fixture
def sandbox_config(sandbox_image: str) -> SandboxConfig:
    """Small limits and short timeouts so hostile tests finish fast."""
    return SandboxConfig(
        backend="docker",
        image=sandbox_image,
        memory_mb=128,
        cpus=1.0,
        pids_limit=32,
        call_timeout_s=3.0,
        start_timeout_s=20.0,
        pool_size=1,
        max_output_bytes=64_000,
    )


@pytest.fixture
def no_leftovers(docker_client):
    """Fails the test if it leaves any gapforge-labelled container (running or not)."""
    before = set(gapforge_containers(docker_client))
    yield
    left = set(gapforge_containers(docker_client)) - before
    assert not left, f"test left gapforge containers behind: {sorted(left)}"


@pytest.fixture
def counter_env_path() -> Path:
    return ENVS / "counter_env.py"
