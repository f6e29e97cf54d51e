"""`gapforge dev teach` end to end on a tiny recipe: its own SFT progress shows, TRL's dataset bars do not."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gapforge.cli import app


def test_dev_teach_prints_its_steps_and_not_the_dataset_bars(tmp_path, capfd):
    from gapforge.demo_policy.teach import TeachConfig

    cfg = TeachConfig(
        instances=1,
        copies=1,
        drills=1,
        warmup_steps=10,
        vocab_size=400,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        epochs=0.1,
        batch_size=2,
        threads=1,
        seed=3,
    )
    recipe = tmp_path / "teach.json"
    recipe.write_text(json.dumps({"recipe": cfg.model_dump()}))
    res = CliRunner().invoke(app, ["dev", "teach", "--recipe", str(recipe), "--out", str(tmp_path / "m"), "--no-eval"])
    seen = " ".join((res.output + "".join(capfd.readouterr())).split())  # the console wraps long lines at its width
    assert res.exit_code == 0, seen
    assert (
        "SFT:" in seen
        and f"(recipe {cfg.recipe_hash()};" in seen
        and (tmp_path / "m" / f"taught-{cfg.recipe_hash()}" / "teach.json").is_file()
    )
    assert "Building labels" not in seen and "Tokenizing" not in seen and "examples/s" not in seen
    import datasets

    assert datasets.is_progress_bar_enabled()  # silenced for the pass only: the process's setting is given back
