"""Report sections for the TRACE paper's protocol (evaluation.report calls them; never prints):

- `all_tasks_section`: the evaluations `all_tasks:<policy>` (`paper_protocol` in `evaluation.comparisons`: every task of the run,
  temperature 0, 1 trial), labelled as the paper's protocol, apart from the held-out split: these tasks include the
  analysis split, so the numbers are not held out;
- the `paper_protocol` comparison (listed in `evaluation.comparisons`): after the held-out evaluation, every policy plays
  those tasks (the held-out split's and the analysis split's of the run, or the tasks given by hand) once at
  temperature 0, stored as `all_tasks:<policy>`; its report sections are these two;
- `toolsandbox_section`: for a ToolSandbox target, what the paper's Table 2 reports per policy — the perfect count
  (scenarios with similarity 1.0) and the mean similarity — from each evaluation's stored episodes
  (envs.toolsandbox.metrics; a scenario played several times counts as perfect only when every trial was, and its
  similarity is the mean over its trials).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.envs.toolsandbox.metrics import is_toolsandbox, stored_metrics
from gapforge.evaluation.comparisons import Comparison
from gapforge.evaluation.reuse import played
from gapforge.evaluation.summary import interval, signed

if TYPE_CHECKING:
    from gapforge.evaluation.comparisons import Evaluation
    from gapforge.store import Store

ALL_TASKS = "all_tasks:"
SCOPES = (("eval:", "held-out split"), (ALL_TASKS, "all tasks, greedy, 1 trial"))


def _ordered(store: Store, run_id: str, prefix: str, keep: Callable[[Any], bool] = lambda e: True) -> list[Any]:
    """The run's evaluations `<prefix><policy>` that `keep` accepts, the base first."""
    rows = [e for e in store.evaluations(run_id) if e.name.startswith(prefix) and keep(e)]
    return sorted(rows, key=lambda e: (e.name != f"{prefix}base", e.name))


def all_tasks_section(store: Store, run_id: str, labels: Mapping[str, str]) -> list[str]:
    """The `all_tasks:*` evaluations as a table (nothing when the run has none); `labels`: the baselines' names."""
    rows = _ordered(store, run_id, ALL_TASKS)
    if not rows:
        return []
    first = rows[0].metrics
    lines = [
        "## Every task, greedy, 1 trial (the TRACE paper's protocol)",
        "",
        f"Env `{first['env']}`, {first.get('tasks')} tasks × 1 trial at temperature 0 per policy: "
        "every task of the run, **the analysis split included, so these numbers are not held out** (the paper's protocol); "
        "the held-out split above is the contamination-free comparison. 95% bootstrap intervals over tasks.",
        "",
        "| policy | pass rate | mean reward | Δ pass rate vs base (paired over tasks) |",
        "|---|---|---|---|",
    ]
    for e in rows:
        m = e.metrics
        mr = m.get("mean_reward") or {}
        reward = "–" if mr.get("value") is None else f"{mr['value']:.3f}"
        vs = signed((m.get("vs_base") or {}).get("pass_rate"), pct=True)
        name = e.name.removeprefix(ALL_TASKS)
        lines.append(f"| {labels.get(name, name)} | {interval(m.get('pass_rate'))} | {reward} | {vs} |")
    return [*lines, ""]


def toolsandbox_section(store: Store, run_id: str, labels: Mapping[str, str]) -> list[str]:
    """Perfect count and mean similarity per evaluated policy and scope, for a ToolSandbox target (else nothing)."""
    table: list[str] = []
    notes: set[str] = set()
    for prefix, scope in SCOPES:
        for e in _ordered(store, run_id, prefix, lambda e: is_toolsandbox(str(e.metrics.get("env", "")))):
            env, child = str(e.metrics["env"]), e.metrics.get("child_run")
            episodes = store.episodes(child, env=env) if child else []
            for found in stored_metrics(episodes):
                overall = found.categories.get("all")
                if overall is None:
                    continue
                if found.note:
                    notes.add(found.note)
                name = e.name.removeprefix(prefix)
                table.append(
                    f"| {labels.get(name, name)} | {scope} | {overall.perfect} of {overall.run} | {overall.mean_similarity:.3f} |"
                )
    if not table:
        return []
    lines = [
        "## ToolSandbox: perfect count and mean similarity (the TRACE paper's Table 2 metrics)",
        "",
        "Perfect: scenarios whose similarity is 1.0 (with several trials, every trial); mean similarity over the scenarios played.",
        "",
        "| policy | scope | perfect | mean similarity |",
        "|---|---|---|---|",
        *table,
    ]
    return [*lines, *(f"\n{n}." for n in sorted(notes)), ""]


class _PaperProtocol(Comparison):
    """Every task of the run at temperature 0, 1 trial, beside the held-out split (`paper_protocol` in `evaluation.comparisons`)."""

    name, optional = "paper_protocol", True

    async def extend(self, ev: Evaluation) -> int:
        split = ev.split
        every = (
            sorted({*split.analysis_tasks, *split.heldout_tasks}) if split is not None and not ev.given else ev.tasks
        )
        probe = ev.make_env()
        try:
            families = {t: probe.task_family(t) for t in every}
        finally:
            probe.close()
        result = await ev.play(
            ev.run_id,
            artifacts=ev.artifacts,
            backend=ev.backend,
            tasks=every,
            families=families,
            trials=1,
            temperature=0.0,
            family_trials_policies=(),
            on_policy_done=lambda name: ev.progress(f"all tasks, greedy: {name}: played and scored"),
            scope="all_tasks",
        )
        return sum(played(p.metrics) for p in result.policies)

    def report(
        self, store: Store, run_id: str, out_dir: Path, labels: Mapping[str, str]
    ) -> tuple[list[str], list[Path]]:
        return all_tasks_section(store, run_id, labels) + toolsandbox_section(store, run_id, labels), []


PROTOCOL_COMPARISON = _PaperProtocol()
