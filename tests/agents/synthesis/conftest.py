"""Synthesis tests (agents/synthesis and its new checks in sandbox/checks): helpers in this
folder are importable (shop_gold, synth_fixtures)."""

from __future__ import annotations

import os

import pytest

from gapforge.agents.synthesis.config import SynthesisConfig
from gapforge.config import SandboxConfig

TAG = "gapforge-sandbox:latest"


@pytest.fixture(scope="session")
def sandbox_cfg(docker_client) -> SandboxConfig:
    """The sandbox image (built offline once if missing) and test-sized limits."""
    from gapforge.sandbox.errors import SandboxError
    from gapforge.sandbox.image import build_image, image_is_current

    if not image_is_current(docker_client, TAG):
        try:
            build_image(docker_client, TAG, method="local-python")
        except SandboxError:
            build_image(docker_client, TAG, method="debootstrap")
    return SandboxConfig(image=TAG, memory_mb=256, call_timeout_s=5.0, start_timeout_s=20.0, pool_size=1)


@pytest.fixture
def no_leftover_containers(docker_client):
    def mine() -> set[str]:
        return {c.id for c in docker_client.containers.list(all=True, filters={"label": f"gapforge.pid={os.getpid()}"})}

    before = mine()
    yield
    assert mine() - before == set(), "the test left gapforge containers behind"


@pytest.fixture
def synthesis_cfg() -> SynthesisConfig:
    return SynthesisConfig(max_attempts=3, validation_seeds=8)
