"""`gapforge export RUN DIR` and `gapforge serve --router DIR`: a run with a stored label-scorer router (tiny model, random
adapters) exported, then served from the bundle alone: the same routing decisions as the run's own router; nothing
private in the bundle; one-line errors for what cannot be exported or served. The gate-routed run of the Docker sandbox,
exported and served through the vLLM stand-in, is tests/evaluation/test_served_is_evaluated.py."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from cli_helpers import one_line_error
from router_helpers import first_messages, random_adapter
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.envs.protocol import Message
from gapforge.errors import UsageError
from gapforge.run_session import RunOptions, create_run
from gapforge.store import Store

CAPS = ["precondition_verification", "structured_data_reasoning"]
SECRET = "sk-export-test-7f3a"


def _run(workspace: Path, tiny_model_dir: Path, *, router: bool = True) -> str:
    """A run with two trained adapters and, when `router`, the label scorer's router stored over them."""
    from gapforge.evaluation.router_record import router_record, save_router
    from gapforge.evaluation.service import run_artifacts

    cfg = load_config(
        None,
        [
            f"workspace={workspace}",
            "policy.kind=local",
            f"policy.local_path={tiny_model_dir}",
            "policy.max_new_tokens=4",
            "routing.backend=transformers",
        ],
        environ={},
    )
    with Store(cfg.store_url) as store:
        run = create_run(store, "trace", "run", cfg, RunOptions())
        for seed, cap in enumerate(CAPS):
            store.put_capability(run, cap, definition=f"{cap}: what it means")
            store.set_capability_retained(run, cap, True)
            path = random_adapter(tiny_model_dir, workspace / "adapters" / run / cap, seed=seed + 3)
            store.put_adapter(
                run, cap, path=str(path), metrics={"best_step": 4, "steps": 8}, status="done", capability=cap
            )
        if router:
            save_router(store, run, router_record(run_artifacts(store, run), backend="transformers"))
            spec = "/srv/agents/my_env.py:BillingEnv?token=tok-123"  # a user's env by absolute path, a keyword
            paired = {"episodes": 8, "tasks": 4, "pass_rate": {"value": 0.25, "low": 0.0, "high": 0.5}}
            for policy, vs in (("base", None), ("trace_routed", paired), (f"adapter:{CAPS[0]}", paired)):
                metrics = {"env": spec, "tasks": 4, "trials": 2, "episodes": 8, "vs_base_paired": vs}
                store.put_evaluation(run, f"eval:{policy}", policy=policy, metrics=metrics)
    return run


def _export(workspace: Path, run: str, out: Path) -> object:
    """`gapforge export` with an endpoint key loaded from the environment (it must not reach the bundle)."""
    key = [
        "--set",
        "policy.endpoint.api_key_env=EXPORT_TEST_KEY",
        "--set",
        "policy.endpoint.base_url=http://127.0.0.1:9/v1",
    ]
    return CliRunner().invoke(
        app,
        ["export", run, str(out), "--set", f"workspace={workspace}", *key],
        env={"COLUMNS": "200", "EXPORT_TEST_KEY": SECRET},
    )


def test_a_bundle_routes_every_message_as_the_run_and_holds_nothing_private(
    workspace: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from gapforge.bundle import bundle_routed, bundle_settings, load_bundle
    from gapforge.cli_serve import served

    run = _run(workspace, tiny_model_dir)
    out = tmp_path / "bundle"
    res = _export(workspace, run, out)
    assert res.exit_code == 0, res.output
    assert f"exported run {run} to {out}: 2 adapters" in res.output
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    for cap in CAPS:
        assert f"adapters/{cap}/adapter_model.safetensors" in files and f"adapters/{cap}/README.md" in files
    text = {f: (out / f).read_text(errors="replace") for f in files if f.endswith((".json", ".md", ".sh"))}
    for f, body in text.items():  # no path of this machine, no secret
        assert str(workspace) not in body and str(tiny_model_dir) not in body and SECRET not in body, f
    conf = json.loads(text["adapters/precondition_verification/adapter_config.json"])
    assert conf["base_model_name_or_path"] == tiny_model_dir.name
    card = text["adapters/precondition_verification/README.md"]
    assert card.startswith(f'---\nbase_model: "{tiny_model_dir.name}"\nlibrary_name: peft\n')
    assert "precondition_verification: what it means" in card and "Kept: step 4" in card
    assert "vllm serve" not in text["serve.sh"] and "--backend local" in text["serve.sh"]  # the label scorer: here
    assert subprocess.run(["sh", "-n", str(out / "serve.sh")]).returncode == 0
    assert (
        "### Held-out split: env `my_env.py:BillingEnv`" in card
    )  # the user's env by its file name: no path, no token
    assert "/srv/" not in card and "tok-123" not in card

    moved = tmp_path / "elsewhere"  # the bundle is self-contained: moved, with the run's workspace gone
    out.rename(moved)
    (workspace / "gapforge.db").rename(workspace / "gone.db")
    cfg = load_config(None, [f"policy.local_path={tiny_model_dir}", "policy.kind=local", "policy.max_new_tokens=4"])
    bundle = load_bundle(moved / "router")
    artifacts, _chat, router = bundle_routed(bundle, cfg, str(tiny_model_dir))
    seed = (
        f"seed={bundle.data['seed']}"  # `serve --router`: the run's answer length and seed, unless --config sets them
    )
    assert bundle_settings(bundle) == [f"policy.max_new_tokens={bundle.data['max_new_tokens']}", seed]
    (tmp_path / "serve.yaml").write_text("policy:\n  max_new_tokens: 7\n")
    assert bundle_settings(bundle, str(tmp_path / "serve.yaml")) == [seed]
    assert [c["name"] for c in artifacts.capabilities] == CAPS
    (workspace / "gone.db").rename(workspace / "gapforge.db")
    run_cfg = load_config(
        None,
        [
            f"workspace={workspace}",
            "policy.kind=local",
            f"policy.local_path={tiny_model_dir}",
            "policy.max_new_tokens=4",
            "routing.backend=transformers",
        ],
    )
    with Store(run_cfg.store_url) as store:
        _a, _c, evaluated, _source = served(run_cfg, store, run)
    messages = [m for per in first_messages().values() for m in per]
    for m in messages:
        mine, theirs = router.route_messages([Message.user(m)]), evaluated.route_messages([Message.user(m)])
        assert (mine.label, mine.adapter) == (theirs.label, theirs.adapter), m
        assert mine.margin == pytest.approx(theirs.margin, abs=1e-5)


def test_what_cannot_be_exported_or_served_is_one_line_with_exit_2(
    workspace: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from gapforge.bundle import load_bundle

    bare = _run(workspace, tiny_model_dir, router=False)
    res = _export(workspace, bare, tmp_path / "b0")
    assert res.exit_code == 2 and f"gapforge evaluate {bare}" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "b0").exists()

    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        from gapforge.evaluation.router_record import router_record, save_router
        from gapforge.evaluation.service import run_artifacts

        save_router(store, bare, router_record(run_artifacts(store, bare), backend="transformers"))
    res = _export(workspace, bare, full)
    assert res.exit_code == 2 and "not empty" in res.output and (full / "keep.txt").read_text() == "mine"

    out = tmp_path / "b1"
    assert _export(workspace, bare, out).exit_code == 0
    assert not list(tmp_path.glob(".b1.partial-*"))
    res = CliRunner().invoke(app, ["serve", "--router", str(out / "router")])  # no --base, no policy.local_path
    one_line_error(res, "no base model given: pass --base DIR")
    edited = json.loads((out / "router" / "router.json").read_text())
    for change, field in (
        ({"routing": {**edited["routing"], "labels": ["a", "a"]}}, "routing.labels"),
        ({"seed": None}, "seed"),
        ({"adapters": [1]}, "adapters"),
    ):
        broken = {k: v for k, v in {**edited, **change}.items() if v is not None}
        (out / "router" / "router.json").write_text(json.dumps(broken))  # a hand-edited bundle
        with pytest.raises(UsageError, match=f"the router does not read back \\({field}: .*: export the run again"):
            load_bundle(out / "router")
    (out / "router" / "router.json").write_text(json.dumps(edited))
    weights = out / "adapters" / CAPS[1] / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # cut short
    with pytest.raises(UsageError, match=f"adapter {CAPS[1]} of the bundle does not read back whole"):
        load_bundle(out / "router")
    with pytest.raises(UsageError, match="router.json not found"):
        load_bundle(out)
    (out / "router" / "router.json").write_text(json.dumps({"gapforge_bundle": 99}))
    with pytest.raises(UsageError, match="not a gapforge bundle of version 2"):
        load_bundle(out / "router")

    runner = CliRunner()
    res = runner.invoke(app, ["serve", "--set", f"workspace={workspace}"])
    assert res.exit_code == 2 and "--router DIR" in res.output
    res = runner.invoke(app, ["serve", bare, "--router", str(out / "router")])
    assert res.exit_code == 2 and "--router DIR" in res.output and "(not both)" in res.output
    res = runner.invoke(app, ["serve", "--router", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "router.json not found" in res.output and "Traceback" not in res.output
    with socket.socket() as busy:  # said before anything loads, not as a path or disk problem after it
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = runner.invoke(app, ["serve", "--router", str(tmp_path / "nope"), "--port", str(port)])
    assert res.exit_code == 2 and f"cannot listen on 127.0.0.1:{port} (Address already in use)" in res.output


def test_a_model_card_edited_after_export_still_serves_under_the_same_names(
    workspace: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from gapforge.bundle import load_bundle
    from gapforge.serving.vllm_backend import adapter_version

    run = _run(workspace, tiny_model_dir)
    out = tmp_path / "bundle"
    assert _export(workspace, run, out).exit_code == 0
    adapter = out / "adapters" / CAPS[0]
    before = adapter_version(adapter)
    (adapter / "README.md").write_text((adapter / "README.md").read_text() + "\nOur notes on this adapter.\n")
    assert load_bundle(out / "router").adapter_paths()[CAPS[0]] == adapter  # reads back whole
    assert adapter_version(adapter) == before  # the name serve.sh gave vLLM
