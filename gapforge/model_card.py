"""The README.md files of a bundle `gapforge export` writes (gapforge/export.py): each adapter's model card (a
model-card metadata header, then the capability, its env's check verdicts, its training and the report's
paired-difference rows of the adapter alone and of routed TRACE, per split: evaluation/report.py `paired_table`)
and the bundle's index (the run's end-of-evaluation lines and comparison, how to serve it). They quote no episode
text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gapforge.config import GapforgeConfig
    from gapforge.store import Store

POLICY_ROWS = ("trace_routed",)  # besides the adapter alone, the rows a model card quotes


def public_spec(spec: str) -> str:
    """An env spec as a bundle quotes it: a built-in as it is; any other by its file names, without `?keywords` (a
    path or a token may sit in either)."""
    from gapforge.envs.registry import is_shop

    if is_shop(spec) or spec.startswith(("tau2:", "toolsandbox")):
        return spec
    return ":".join(Path(part).name if "/" in part else part for part in spec.split("?", 1)[0].split(":"))


def kept_text(metrics: dict) -> str:
    """The checkpoint kept and why: step 0 is the untrained adapter (no step beat it by more than the
    held-out noise, training.selection.beats_step0); otherwise the paired gain over step 0 and its lower bound."""
    step = metrics.get("best_step")
    if step is None:
        return "-"
    if step == 0:
        return "step 0 (untrained)"
    margin = next((e.get("vs_step0") for e in metrics.get("curve") or [] if e.get("step") == step), None)
    if not margin:
        return f"step {step}"
    return f"step {step} (+{margin['diff']:.3f}, low {margin['low']:+.3f}, n {margin['n']})"


def adapter_meta(path: Path) -> dict[str, Any]:
    from gapforge.training.service import METADATA_FILE

    try:
        return json.loads((path / METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _env_checks(store: Store, run_id: str, capability: str) -> tuple[str, list[str]]:
    """(which attempt trained the adapter, a line per check of its validation: name, verdict, required)."""
    from gapforge.sandbox.checks.report import CheckResult

    accepted = [e for e in store.synthetic_envs(run_id, capability) if e.status == "accepted"]
    if not accepted:
        return "no accepted synthetic env stored", []
    env = accepted[-1]
    row = store.get_validation(env.id)
    checks = ((row.report if row else {}).get("report") or {}).get("checks") or []
    lines = []
    for c in checks:
        r = CheckResult.model_validate({k: v for k, v in c.items() if k in CheckResult.model_fields})
        lines.append(f"- `{r.name}`: {r.verdict}{'' if r.required else ' (advisory)'}")
    return f"attempt {env.attempt}, accepted", lines


def _results(store: Store, run_id: str, adapter: str) -> list[str]:
    """Per split the run evaluated: the report's paired-difference rows of this adapter alone and of routed TRACE."""
    from gapforge.evaluation.registry import labels
    from gapforge.evaluation.report import paired_rows, paired_table
    from gapforge.evaluation.summary import UNSEEN

    out: list[str] = []
    names = labels(store, run_id)
    for scope, title in (("eval", "held-out split"), (UNSEEN, "unseen records (evaluation.unseen_env)")):
        evals = [e for e in store.evaluations(run_id) if e.name.startswith(f"{scope}:")]
        wanted = {f"{scope}:adapter:{adapter}", *(f"{scope}:{p}" for p in POLICY_ROWS)}
        rows = paired_rows([e for e in evals if e.name in wanted], names, scope)
        if not rows:
            continue
        first = evals[0].metrics
        out += [
            f"### {title.capitalize()}: env `{public_spec(str(first.get('env')))}`, {first.get('tasks')} tasks × "
            f"{first.get('trials')} trials",
            "",
            *paired_table(rows),
            "",
        ]
    return out or ["No held-out evaluation is stored with the run.", ""]


def model_card(store: Store, run_id: str, cfg: GapforgeConfig, cap: dict[str, str], base: str, where: Path) -> str:
    """The adapter's README.md: a model-card metadata header, then the capability, its env, its training and the
    report's numbers."""
    adapter = cap["adapter"]
    row = store.get_adapter(run_id, adapter)
    metrics = row.metrics if row else {}
    meta = adapter_meta(where)  # the adapter's directory as found (evaluation.service.adapter_location)
    tcfg = meta.get("config") or cfg.training.model_dump(mode="json")
    attempt, checks = _env_checks(store, run_id, cap["name"])
    before, after = metrics.get("heldout_before"), metrics.get("heldout_after")
    steps = metrics.get("steps", "–")
    rollouts = tcfg.get("groups_per_step", 0) * tcfg.get("num_generations", 0)
    header = [
        "---",
        f"base_model: {json.dumps(base)}",
        "library_name: peft",
        "pipeline_tag: text-generation",
        "tags:",
        *(f"- {t}" for t in ("gapforge", "trace", "lora", "grpo", f"capability-{cap['name'].replace('_', '-')}")),
        "---",
    ]
    body = [
        f"# `{adapter}`: a LoRA adapter for the capability `{cap['name']}`",
        "",
        f"Trained by gapforge (TRACE) in run `{run_id}` on the base `{base}`"
        + (
            f" (sha256 of its config and weights `{meta['base_model_sha256'][:16]}…`)."
            if meta.get("base_model_sha256")
            else "."
        ),
        "",
        "## Capability",
        "",
        cap["definition"] or "(no definition stored)",
        "",
        "## Training environment",
        "",
        f"The synthetic env `synthetic:{cap['name']}` ({attempt}); its checks in the Docker sandbox:",
        "",
        *(checks or ["- (no validation report stored)"]),
        "",
        "## Training",
        "",
        f"GRPO with LoRA (rank {tcfg.get('lora_rank', '–')}, learning rate {tcfg.get('learning_rate', '–')}): "
        f"{steps} steps of {rollouts} rollouts (budget: max_steps {tcfg.get('max_steps', '–')}, "
        f"{tcfg.get('train_seeds', '–')} training seeds).",
        f"Kept: {kept_text(metrics)}, selected on {tcfg.get('heldout_seeds', '–')} held-out synthetic seeds"
        + (
            f": mean reward {before:.3f} at step 0 -> {after:.3f} at the kept step."
            if before is not None and after is not None
            else "."
        ),
        "",
        "## Results on the target (paired with the base, as the run's report states them)",
        "",
        "Episode (task, trial i) of a policy minus episode (task, trial i) of the base; 95% two-stage bootstrap "
        "intervals (tasks, then trials). `trace_routed` is the router over every adapter of the bundle.",
        "",
        *_results(store, run_id, adapter),
        "## Use",
        "",
        "Serve it with the others through the bundle's `serve.sh` (vLLM multi-LoRA, routed by `gapforge serve "
        "--router`), or load it on the base with PEFT (`PeftModel.from_pretrained(base, this_dir)`).",
        "",
    ]
    return "\n".join([*header, "", *body])


def bundle_index(store: Store, run_id: str, base: str, record: Any) -> str:
    from gapforge.evaluation.comparison import comparisons
    from gapforge.evaluation.summary import UNSEEN, headline, scope_metrics

    lines = [
        f"# gapforge bundle of run `{run_id}`",
        "",
        f"Base model `{base}`; routing.backend `{record.backend}`. Adapters (one model card each under `adapters/`):",
        "",
        *(f"- `{c.adapter}`: {c.name} — {c.definition}" for c in record.capabilities),
        "",
        "## Held-out results",
        "",
    ]
    for scope, title in (("eval", "Held-out split"), (UNSEEN, "Unseen records")):
        metrics = scope_metrics(store, run_id, scope)
        if metrics:
            lines += [f"{title} (as the run printed it):", "", "```text", *headline(metrics), "```", ""]
    if compared := comparisons(store, run_id):
        lines += ["```text", *compared, "```", ""]
    serve = (
        "`BASE_DIR=/path/to/base ./serve.sh` serves it with transformers + PEFT on this machine (the label scorer "
        "reads the base in gapforge's own process)."
        if record.backend == "transformers"
        else "`BASE_DIR=/path/to/base ./serve.sh` starts vLLM with every adapter, waits until it answers, and starts "
        "`gapforge serve --router router/` in front of it. Without a GPU: `gapforge serve --router router/ --base "
        "/path/to/base`"
        + (
            " (transformers + PEFT on this machine)."
            if record.backend == "gate"
            else " with `--set policy.endpoint.base_url=URL --set policy.endpoint.model=NAME`: this router scores on "
            "that vLLM server's completions."
        )
    )
    kept = (
        ""
        if record.backend == "gate"
        else " `router/router.json` keeps one synthetic-env example trajectory per "
        "capability: the label scorer's prompt reads them."
    )
    lines += [
        "## Serve",
        "",
        f"{serve} Its model `gapforge-router` routes each conversation once, as the run evaluated.",
        "",
        "This bundle holds no text of the run's target episodes, no secrets and no paths of the machine that made it."
        + kept,
        "",
    ]
    return "\n".join(lines)
