"""Every ready-made config in configs/ loads through the one loader (unknown keys are rejected)."""

from __future__ import annotations

import pytest

from gapforge.config import load_config
from tests.graph.conftest import ROOT

CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def test_there_is_a_real_model_config() -> None:
    assert any("tau2" in p.name for p in CONFIGS)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads(path) -> None:
    cfg = load_config(path, [], environ={})
    assert cfg.rollouts.env.startswith(("tau2:", "composite:tau2:", "toolsandbox"))
    assert cfg.policy.kind == "endpoint" and cfg.llm.kind == "openai"
