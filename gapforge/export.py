"""`gapforge export RUN DIR`: a run's measured result as a bundle that serves without the run's store.

    DIR/README.md                      what the bundle holds, the held-out results, how to serve it
    DIR/serve.sh                       `vllm serve ... --enable-lora --lora-modules ...` and the routed `gapforge serve`
    DIR/router/router.json             the router as evaluated: its options in label order, the trained gate
                                       (routing.backend=gate) and the `routing:` settings it ran with
    DIR/adapters/NAME/                 each kept adapter: the PEFT files and a model card (README.md)
    DIR/trl/CAPABILITY/                with --trl: its synthetic env as a TRL environment (gapforge/export_trl.py)

`gapforge serve --router DIR/router --base BASE_DIR` routes with that router over those adapters and needs no store,
no sandbox and no synthetic env (gapforge/bundle.py). The model cards quote the report's paired-difference rows
(gapforge/model_card.py) of the adapter alone and of routed TRACE, per split.

Nothing private leaves by accident: the bundle holds no secret (no endpoint key or store URL), no absolute path of
this machine (the base model is named, `--base-model NAME`; the adapters' `base_model_name_or_path` is rewritten to
that name) and no episode text: no analysis-split task the gate was trained on, no synthetic-env opening (but in the
TRL datasets `--trl` asks for), and no example trajectory unless the label scorer (routing.backend transformers or
vllm) reads it in its prompt. `export_run`
checks the written text for the workspace, the base model's directory and the home directory before it finishes.
The bundle is written beside DIR and renamed into place: an interrupted export leaves no half bundle.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.bundle import BUNDLE_VERSION, ROUTER_FILE
from gapforge.errors import UsageError
from gapforge.model_card import adapter_meta, bundle_index, model_card
from gapforge.serve_script import CHAT_TEMPLATE, chat_flags, serve_script
from gapforge.serving.vllm_backend import LOADED

if TYPE_CHECKING:
    from gapforge.config import GapforgeConfig
    from gapforge.store import Store

CARD = "README.md"


@dataclass(frozen=True)
class ExportResult:
    out: Path
    adapters: list[str]
    files: int


def base_name(cfg: GapforgeConfig, given: str | None) -> str:
    """The base model as the bundle names it: `given` (e.g. a Hub id), else the served model's name for an endpoint
    policy, else the base model directory's own name (never its path)."""
    if given:
        return given
    if cfg.policy.kind == "endpoint" and cfg.policy.endpoint.model:
        return cfg.policy.endpoint.model
    return Path(cfg.policy.local_path or "base-model").resolve().name


def _router_json(record: Any, cfg: GapforgeConfig, run_id: str, base: str, base_sha: str | None) -> dict[str, Any]:
    """The router as evaluated, without what serving does not read: the gate's training examples (analysis-split text),
    the synthetic envs' openings, and the example trajectories when the gate (which never reads them) routes. Its
    backend is the stored router's; the server's address is the serving machine's to give (`--vllm-url`)."""
    gate = record.gate.model_copy(update={"examples": []}) if record.gate is not None else None
    caps = [c.model_copy(update={"example": ""}) if record.backend == "gate" else c for c in record.capabilities]
    kept = record.model_copy(update={"openings": None, "seeds": [], "gate": gate, "capabilities": caps})
    routing = cfg.routing.model_copy(update={"backend": record.backend})
    return {
        "gapforge_bundle": BUNDLE_VERSION,
        "run": run_id,
        "base_model": base,
        "base_model_sha256": base_sha,
        "max_new_tokens": cfg.policy.max_new_tokens,
        "seed": cfg.seed,
        "routing": routing.model_dump(mode="json"),
        "router": kept.model_dump(mode="json"),
        "adapters": {c.adapter: f"../adapters/{c.adapter}" for c in record.capabilities},
    }


def _private(cfg: GapforgeConfig, workspace: Path) -> list[str]:
    """Strings no exported file may hold: this machine's paths and the config's secrets (the endpoint keys the loader
    read, gapforge/config.py `load_config`, and the store URL's password)."""
    from urllib.parse import urlsplit

    paths = [str(workspace.resolve()), str(Path.home())]
    if cfg.policy.local_path:
        paths.append(str(Path(cfg.policy.local_path).resolve()))
    keys = [ep._key for ep in (cfg.llm.endpoint, cfg.policy.endpoint)]  # loaded keys, whether or not sent anywhere
    secrets = [k.get_secret_value() for k in keys if k is not None]
    secrets.append(urlsplit(cfg.store_url).password or "")
    return [p for p in [*paths, *secrets] if p and p != "/" and len(p) > 3]


def export_run(
    store: Store,
    run_id: str,
    out: Path,
    cfg: GapforgeConfig,
    *,
    base_model: str | None = None,
    trl: bool = False,
    say: Callable[[str], None] = lambda line: None,
) -> ExportResult:
    """Write the bundle of `run_id` to `out` (module doc); `trl`: each adapter's synthetic env as a TRL environment too
    (gapforge/export_trl.py: read in the sandbox). UsageError (one line) when the run has no router stored over its
    adapters, an adapter's files do not read back whole, or `out` holds anything."""
    from gapforge.evaluation.router_record import load_router
    from gapforge.evaluation.service import run_artifacts
    from gapforge.store.files import check_dir, complete_dir

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not empty: export into a new directory")
    workspace = Path(cfg.workspace)
    artifacts = run_artifacts(store, run_id, workspace=workspace)
    if artifacts.damaged:
        name, problem = next(iter(artifacts.damaged.items()))
        raise UsageError(f"adapter {name} does not read back whole ({problem}): run `gapforge train {run_id}` again")
    record = load_router(store, run_id)
    if record is None or not record.matches(artifacts) or (record.backend == "gate" and record.gate is None):
        raise UsageError(
            f"run {run_id} stores no router over its trained adapters: run `gapforge evaluate {run_id}` first (it builds and stores it)"
        )
    if not record.capabilities:
        raise UsageError(f"run {run_id} has no trained adapter to export")
    base = base_name(cfg, base_model)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    for stale in [tmp, *out.parent.glob(f".{out.name}.partial-*")]:  # this one, and those of exports killed before
        if stale == tmp or not _alive(stale.name.rpartition("-")[2]):
            shutil.rmtree(stale, ignore_errors=True)
    try:
        ranks, files, base_sha = [], 0, None
        for cap in record.options():
            src = artifacts.adapter_paths[cap["adapter"]]
            with complete_dir(tmp / "adapters" / cap["adapter"], f"the exported adapter {cap['adapter']}") as dst:
                for name in LOADED:  # what PEFT and vLLM load: no README, metadata or manifest of the run
                    if (src / name).is_file():
                        shutil.copyfile(src / name, dst / name)
                conf = json.loads((dst / "adapter_config.json").read_text(encoding="utf-8"))
                conf["base_model_name_or_path"] = base
                (dst / "adapter_config.json").write_text(json.dumps(conf, indent=2), encoding="utf-8")
            card = model_card(store, run_id, cfg, cap, base, src)  # outside the manifest: a user may edit it
            (tmp / "adapters" / cap["adapter"] / CARD).write_text(card, encoding="utf-8")
            ranks.append(int(conf.get("r", 0)))
            base_sha = base_sha or adapter_meta(src).get("base_model_sha256")
            say(f"adapter {cap['adapter']} ({cap['name']}): PEFT files and model card")
        (tmp / "router").mkdir()
        router = _router_json(record, cfg, run_id, base, base_sha)
        (tmp / "router" / ROUTER_FILE).write_text(json.dumps(router, indent=1), encoding="utf-8")
        say(f"router: routing.backend={record.backend}, {len(record.capabilities)} adapters + none")
        adapters = {c.adapter: tmp / "adapters" / c.adapter for c in record.capabilities}
        template, chat = chat_flags(cfg.policy.local_path)
        if template is not None:
            (tmp / CHAT_TEMPLATE).write_text(template, encoding="utf-8")
        elif record.backend != "transformers":
            say(
                f"warning: no base weights at policy.local_path ({cfg.policy.local_path}): serve.sh leaves vLLM the model's own chat template"
            )
        script = serve_script(base, adapters, ranks, record.backend, chat)
        (tmp / "serve.sh").write_text(script, encoding="utf-8")
        (tmp / "serve.sh").chmod(0o755)
        (tmp / "README.md").write_text(bundle_index(store, run_id, base, record), encoding="utf-8")
        if trl:
            import functools

            from gapforge.export_trl import export_trl_envs
            from gapforge.sandbox.env import open_env

            opener = functools.partial(open_env, cfg=cfg.sandbox)
            export_trl_envs(store, run_id, tmp, cfg, [c.name for c in record.capabilities], open_env=opener, say=say)
        _check_private(tmp, _private(cfg, workspace))
        for p in tmp.rglob("*"):
            files += p.is_file()
        for name in adapters:
            if problem := check_dir(tmp / "adapters" / name, required=("adapter_config.json",)):
                raise UsageError(f"the exported adapter {name} does not read back: {problem}")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ExportResult(out, [c.adapter for c in record.capabilities], files)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _check_private(root: Path, private: list[str]) -> None:
    """UsageError naming the file when one would hold a private string (what writes the bundle leaves them out: the
    env spec by its file name, gapforge/model_card.py `public_spec`; this is the last line of defence)."""
    for p in root.rglob("*"):
        if not p.is_file() or p.suffix not in (".json", ".jsonl", ".md", ".sh", ".py", ".jinja"):
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        for s in private:
            if s in text:
                what = "a secret" if not s.startswith("/") else f"the path {s}"
                raise UsageError(f"{p.relative_to(root)} would hold {what}: not exported (report this as a bug)")
