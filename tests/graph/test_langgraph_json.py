"""langgraph.json's graph entry imports and compiles (what `langgraph dev` loads)."""

from __future__ import annotations

import importlib.util
import json

from tests.graph.conftest import ROOT


def test_langgraph_json_graph_entry_imports_and_compiles() -> None:
    spec = json.loads((ROOT / "langgraph.json").read_text())
    assert spec["dependencies"] == ["."]
    path, _, attr = spec["graphs"]["gapforge"].partition(":")
    module_spec = importlib.util.spec_from_file_location("langgraph_entry", ROOT / path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    graph = getattr(module, attr)
    drawn = graph.get_graph().draw_mermaid()
    for node in (
        "collect_rollouts",
        "discover",
        "label",
        "select",
        "review",
        "capability",
        "build_router",
        "evaluate",
        "report",
    ):
        assert node in drawn
    sub = graph.get_graph(xray=1).draw_mermaid()
    assert "synthesize" in sub and "validate" in sub and "train" in sub
