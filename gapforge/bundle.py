"""A bundle `gapforge export` wrote, read back and served (`gapforge serve --router DIR`): its router directory
checked (`load_bundle`), then the base with the bundle's adapters, here or on a vLLM server, routed by the bundle's
router with the `routing:` settings it was evaluated with (`bundle_routed`). No store, sandbox or synthetic env."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.errors import UsageError
from gapforge.faults import first_problem

if TYPE_CHECKING:
    from gapforge.config import GapforgeConfig

BUNDLE_VERSION = 2  # 2: routing.vllm_base_url / vllm_model / timeout_s gone (the label scorer reads policy.endpoint)
ROUTER_FILE = "router.json"


@dataclass(frozen=True)
class Bundle:
    """A bundle's router read back (`load_bundle`): its file's data and the router record it holds, validated."""

    root: Path
    data: dict[str, Any]
    record: Any  # evaluation.router_record.RouterRecord

    def adapter_paths(self) -> dict[str, Path]:
        return {name: (self.root / rel).resolve() for name, rel in self.data["adapters"].items()}


def load_bundle(router_dir: str | Path) -> Bundle:
    """The router directory of an exported bundle, checked: its file parses, names this format, and every adapter it
    routes to reads back whole. UsageError (one line) otherwise."""
    from gapforge.evaluation.router_record import RouterRecord
    from gapforge.store.files import check_dir

    root = Path(router_dir)
    path = root / ROUTER_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise UsageError(f"{path} not found: pass the router/ directory of a bundle `gapforge export` wrote") from None
    except ValueError as e:
        raise UsageError(f"{path} is not JSON ({e}): export the run again") from None
    if not isinstance(data, dict) or data.get("gapforge_bundle") != BUNDLE_VERSION:
        raise UsageError(f"{path} is not a gapforge bundle of version {BUNDLE_VERSION}: export the run again")
    from pydantic import BaseModel, ValidationError

    from gapforge.agents.router import RoutingConfig

    class BundleFile(BaseModel):  # what serving reads of the file (the rest: the export's own record)
        run: str
        adapters: dict[str, str]
        max_new_tokens: int
        seed: int
        routing: RoutingConfig
        router: RouterRecord

    try:
        record = BundleFile.model_validate(data).router
    except ValidationError as e:
        raise UsageError(f"{path}: the router does not read back ({first_problem(e)}): export the run again") from None
    bundle = Bundle(root, data, record)
    for name, p in bundle.adapter_paths().items():
        if problem := check_dir(p, required=("adapter_config.json",)):
            raise UsageError(f"adapter {name} of the bundle does not read back whole: {problem}")
    return bundle


def bundle_settings(bundle: Bundle, config_path: str | None = None) -> list[str]:
    """The run's settings a served bundle starts from: its answer length and seed, each unless the `--config` file sets
    it (`--set` items go on top of both)."""
    import yaml

    from gapforge.run_config import file_tree, leaves

    try:
        in_file = dict(leaves(file_tree(config_path)))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # get_config reports the file's fault in one line
        in_file = {}
    kept = {"policy.max_new_tokens": bundle.data["max_new_tokens"], "seed": bundle.data["seed"]}
    return [f"{key}={value}" for key, value in kept.items() if key not in in_file]


FIXED = ("backend", "labels", "gate")  # what the bundle's router was built and evaluated with


def bundle_routing(bundle: Bundle, cfg: GapforgeConfig, overridden: list[str]) -> Any:
    """The bundle's `routing:` settings, with the keys the user set (`overridden`: dotted `routing.*` names) taken
    from `cfg`; the router's own (backend, labels, gate) cannot change: UsageError (one line)."""
    from gapforge.agents.router import RoutingConfig

    routing = RoutingConfig.model_validate(bundle.data["routing"])
    for key in overridden:
        leaf = key.removeprefix("routing.").split(".", 1)[0]
        if leaf in FIXED:
            raise UsageError(f"{key}: the bundle's router was built with routing.{leaf} as it is: serve it unchanged")
        routing = routing.model_copy(update={leaf: getattr(cfg.routing, leaf)})
    return routing


def bundle_routed(
    bundle: Bundle, cfg: GapforgeConfig, base_dir: str, overridden: list[str] | None = None
) -> tuple[Any, Any, Any]:
    """(artifacts, chat backend, router) of a bundle: the base at `base_dir` with the bundle's adapters, in this
    process (policy.kind local) or on the vLLM server of policy.endpoint (policy.kind endpoint), routed by the
    bundle's router with the `routing:` settings it was evaluated with and the `routing.*` keys the user set
    (`overridden`, bundle_routing); routing.backend=vllm scores on policy.endpoint's vLLM server."""
    from gapforge.evaluation.service import RunArtifacts, build_router, load_backend

    record = bundle.record
    routing = bundle_routing(bundle, cfg, overridden or [])
    artifacts = RunArtifacts(bundle.data["run"], record.options(), bundle.adapter_paths())
    if cfg.policy.kind == "endpoint":
        from gapforge.stages.routing import vllm_backend

        if record.backend == "transformers":
            raise UsageError(
                "this bundle routes with routing.backend=transformers (the base in this process): serve it with --backend local"
            )
        chat = vllm_backend(cfg, artifacts.adapter_paths)
    else:
        chat = load_backend(base_dir, artifacts, max_new_tokens=cfg.policy.max_new_tokens, seed=cfg.seed)
    router = build_router(
        artifacts,
        routing=routing,
        backend=chat,
        tokenizer_path=base_dir,
        gate=record.gate.state if record.gate is not None else None,
        endpoint=cfg.policy.endpoint,
    )
    return artifacts, chat, router
