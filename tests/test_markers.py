"""The collection-time markers (tests/markers.py) that `make test-fast` selects on."""

from __future__ import annotations

import ast
from pathlib import Path

from markers import SLOW, markers_for

ROOT = Path(__file__).parents[1]


def test_a_service_fixture_anywhere_in_the_closure_gives_its_marker() -> None:
    assert markers_for("tests/x/test_a.py::test_b", ["tmp_path", "sandbox_image", "docker_client"]) == {"docker"}
    assert markers_for("tests/x/test_a.py::test_b", ["postgres_url", "ray_cluster"]) == {"postgres", "ray"}
    assert markers_for("tests/x/test_a.py::test_b", ["tmp_path", "workspace"]) == set()


def test_a_listed_test_is_slow_with_every_parameter_and_a_listed_file_with_every_test() -> None:
    name = "tests/executor/test_processes.py::test_a_factory_that_cannot_travel_plays_on_the_loop"
    assert markers_for(name, []) == {"slow"} and markers_for(name + "[2]", ["docker_client"]) == {"slow", "docker"}
    assert markers_for(name + "_too", []) == set()  # a longer name is another test
    assert markers_for("tests/envs/test_tau2_parity.py::test_gold_replays_match_tau2[retail-0]", []) == {"slow"}


def test_every_slow_entry_names_a_test_that_exists() -> None:
    """A renamed or removed test would silently fall back into the inner loop: its entry must follow it."""
    for key in SLOW:
        path, _, name = key.partition("::")
        assert (ROOT / path).is_file(), f"SLOW names a missing file: {key}"
        if name:
            tree = ast.parse((ROOT / path).read_text())
            defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            assert name in defined, f"SLOW names a test that {path} does not define: {name}"
