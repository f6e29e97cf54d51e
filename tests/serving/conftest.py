"""Fixtures shared by the tests/serving modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from tool_call_model import teach_tool_calls


@pytest.fixture(scope="session")
def taught_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model taught to emit TEACH[GOOD_REQUEST] (a valid tool call) and TEACH[BROKEN_REQUEST] (a broken one); built once."""
    return teach_tool_calls(tiny_model_dir, tmp_path_factory.mktemp("taught-model"))
