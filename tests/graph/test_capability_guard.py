"""The per-capability guard: a capability's own failure is recorded in its row; a full disk is nobody's verdict."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from gapforge.config import load_config
from gapforge.graph.context import GraphContext, SynthesisAttempt
from gapforge.graph.graph import build_graph
from gapforge.graph.runner import drive, initial_state
from gapforge.wiring import open_store
from tests.fakes.fake_stages import FakeStages
from tests.graph.conftest import write_config


def _writing_fails(code: int) -> type[FakeStages]:
    class WritingFails(FakeStages):
        async def synthesize(self, run_id: str, capability: str, attempt: int) -> SynthesisAttempt:
            if capability == "alpha":  # writing the generated module to the workspace
                raise OSError(code, f"{errno.errorcode[code]} writing alpha_env.py")
            return await super().synthesize(run_id, capability, attempt)

    return WritingFails


async def _run(tmp_path: Path, stages_cls: type[FakeStages]) -> dict:
    cfg = load_config(write_config(tmp_path / "c.yaml", tmp_path / "ws"), [], environ={})
    store = open_store(cfg)
    try:
        ctx = GraphContext(stages=stages_cls(cfg, store), repeats=2, max_attempts=3)
        run_id = store.create_run("trace", {})
        return (await drive(build_graph(InMemorySaver()), run_id, ctx, start=initial_state(run_id))).values
    finally:
        store.close()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
async def test_a_full_disk_in_a_stage_stops_the_run_instead_of_failing_the_capability(
    tmp_path: Path, code: int
) -> None:
    with pytest.raises(OSError) as err:
        await _run(tmp_path, _writing_fails(code))
    assert err.value.errno == code  # reaches the CLI (gapforge.cli_common: is_disk_full -> exit 3, resumable)


async def test_any_other_os_error_of_a_stage_fails_only_its_capability(tmp_path: Path) -> None:
    values = await _run(tmp_path, _writing_fails(errno.EACCES))
    caps = values["capabilities"]
    assert caps["alpha"]["status"] == "failed" and caps["alpha"]["error"].startswith("synthesize: PermissionError: ")
    assert caps["beta"]["status"] != "failed"
