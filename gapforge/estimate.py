"""`gapforge run --estimate` (and `gapforge demo --estimate`): what a config will cost, before anything is spent.

A probe first plays a few of the target's tasks with the configured policy (gapforge/estimate_probe.py, in memory:
nothing is stored), for what the config cannot say: how many tokens the policy writes in an episode, how long an
episode's text is (what each labeling call reads), what an LLM user simulator spends per episode, and how fast the
policy generates here. The rest follows from the config, stage by stage, with the same arithmetic the stages use: the analysis split's tasks x
`rollouts.samples` and the held-out tasks' openings, the labeling passes, GRPO readiness groups, the training budget
(training.budget), GRPO on the target at the adapters' budget, and the evaluation's trials per task and policy
(evaluation.run.EvalPlan.task_trials) on the held-out split and `evaluation.unseen_env`'s tasks. What is not known
before a run is assumed and said: how many capabilities are retained (`analysis.max_retained`, else
ASSUMED_CAPABILITIES), how many attempts synthesis takes (the middle of 1 and `synthesis.max_attempts`), and how many
capabilities discovery names (the middle of its bounds). Dollars: tokens at
`pricing.tokens`; the policy's generation time (the probe's rate, or `--throughput`) as this machine's CPU core-hours,
or GPU-hours for a served policy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from gapforge.estimate_probe import Probe, probe_target, unseen_families
from gapforge.pricing import Models, stage_dollars

ASSUMED_CAPABILITIES = 3  # retained capabilities when analysis.max_retained does not bound them
PROMPT_OVERHEAD_TOKENS = 1500  # instructions around an analyst's or the generator's material (the prompt files' size)
LABEL_TOKENS_PER_CAPABILITY = 50  # a labeling answer: a verdict and a line of evidence per capability
DISCOVERY_TOKENS_PER_CAPABILITY = 160  # a discovery answer: a name, a definition and example ids per capability


@dataclass(frozen=True)
class Row:
    stage: str
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    policy_rollouts: int = 0
    note: str = ""

    def counters(self, probe: Probe, compute_dollars_per_s: float) -> dict[str, float]:
        """The stage's counters (gapforge.pricing's names) and its policy's generation seconds and their dollars."""
        seconds = self.policy_rollouts * probe.policy_tokens / max(probe.tokens_per_s, 1e-9)
        counters = {k: getattr(self, k) for k in ("llm_calls", "prompt_tokens", "completion_tokens", "policy_rollouts")}
        return counters | {"compute_s": seconds, "compute_dollars": seconds * compute_dollars_per_s}


def estimate_rows(
    cfg: Any, probe: Probe, tasks: list[str], families: dict[str, str], unseen: dict[str, str] | None = None
) -> list[Row]:
    """Each stage's calls, tokens and policy rollouts for `cfg` (see the module doc for what is assumed); `unseen`:
    task -> family of evaluation.unseen_env, the second held-out split every policy plays too."""
    from gapforge.agents.analysis.compact import EPISODE_BUDGET_TOKENS, ByteEstimate
    from gapforge.agents.analysis.split import heldout_samples, split_tasks
    from gapforge.agents.synthesis.config import EPISODE_CHARS, EPISODES_IN_PROMPT
    from gapforge.agents.synthesis.generator import EXAMPLE
    from gapforge.evaluation.run import EvalPlan
    from gapforge.evaluation.summary import BASE, GRPO_TARGET, ROUTED
    from gapforge.training.budget import training_rollout_budget

    a, syn, ready = cfg.analysis, cfg.synthesis, cfg.grpo_readiness
    caps = a.max_retained or ASSUMED_CAPABILITIES
    named = (a.min_capabilities + a.max_capabilities) // 2
    split = split_tasks({t: families.get(t, "") for t in tasks}, a.split_fraction, a.seed, cfg.rollouts.env)
    analysed = len(split.analysis) * cfg.rollouts.samples
    once = heldout_samples(cfg.rollouts.user, cfg.rollouts.env, cfg.rollouts.samples)
    collected = analysed + len(split.heldout) * once
    per_episode = min(probe.text_tokens, EPISODE_BUDGET_TOKENS)
    user = (probe.user_prompt, probe.user_completion)

    def playing(stage: str, rollouts: int, note: str = "") -> Row:
        return Row(stage, 0, int(rollouts * user[0]), int(rollouts * user[1]), rollouts, note)

    shown = min(a.discovery_budget_tokens, analysed * per_episode)
    attempts = (1 + syn.max_attempts) / 2
    module = ByteEstimate().count(EXAMPLE.read_text())  # the example module: what a generated one is near
    generator_prompt = PROMPT_OVERHEAD_TOKENS + EPISODES_IN_PROMPT * EPISODE_CHARS // 4 + 2 * module
    readiness = int(min(syn.rollout_budget, attempts * ready.groups * ready.samples))
    heldout = sorted(split.heldout)
    ecfg = cfg.evaluation
    plan = EvalPlan(
        "estimate",
        cfg.rollouts.env,
        heldout,
        trials=ecfg.trials,
        family_trials=ecfg.family_trials,
        family_trials_policies=ecfg.family_trials_policies,
        min_family_episodes=ecfg.min_family_episodes,
    )
    policies = [BASE, ROUTED, *(f"adapter:{i}" for i in range(caps)), "capability_hints"]
    policies += list(ecfg.comparisons)
    evaluated = sum(sum(plan.task_trials(p, families).values()) for p in policies)
    where = f"{len(heldout)} held-out tasks"
    if unseen:  # the same settings over every task of the unseen records
        second = replace(plan, tasks=sorted(unseen))
        evaluated += sum(sum(second.task_trials(p, unseen).values()) for p in policies)
        where += f" and {len(unseen)} of the unseen records"
    rows = [
        playing(
            "collect_rollouts",
            collected,
            f"{len(split.analysis)} analysis tasks x {cfg.rollouts.samples} samples, {len(split.heldout)} held-out x {once}",
        ),
        Row("discover", 1, PROMPT_OVERHEAD_TOKENS + int(shown), DISCOVERY_TOKENS_PER_CAPABILITY * named),
        Row(
            "label",
            a.passes * analysed,
            int(a.passes * analysed * (PROMPT_OVERHEAD_TOKENS + per_episode)),
            a.passes * analysed * LABEL_TOKENS_PER_CAPABILITY * named,
            note=f"{a.passes} passes x {analysed} analysis-split episodes, {named} capabilities",
        ),
        Row(
            "synthesize",
            int(caps * attempts),
            int(caps * attempts * generator_prompt),
            int(caps * attempts * module),
            note=f"{caps} capabilities x {attempts:g} attempts",
        ),
        Row(
            "validate",
            int(caps * attempts) if syn.review else 0,
            int(caps * attempts * (PROMPT_OVERHEAD_TOKENS + module)) if syn.review else 0,
            int(caps * attempts * 200) if syn.review else 0,
            caps * readiness,
            "the LLM review of each attempt; GRPO readiness rollouts",
        ),
        Row("train", policy_rollouts=training_rollout_budget(cfg, caps), note="GRPO steps x rollouts per step"),
    ]
    if GRPO_TARGET in ecfg.comparisons:
        rows.append(playing("train_baseline", training_rollout_budget(cfg, caps), "the adapters' training budget"))
    rows.append(playing("evaluate", evaluated, f"{where}, {len(policies)} policies"))
    return rows


def compute_price(cfg: Any) -> tuple[float, str]:
    """$ per second of policy generation, and what it assumes: GPU-hours for a served policy, else this machine's
    CPU cores."""
    if cfg.policy.kind == "endpoint":
        return cfg.pricing.gpu_hour / 3600, f"a GPU at ${cfg.pricing.gpu_hour:g}/hour serves the policy"
    cores = os.cpu_count() or 1
    return cores * cfg.pricing.cpu_hour / 3600, f"{cores} CPU cores at ${cfg.pricing.cpu_hour:g}/core-hour"


def estimate_lines(cfg: Any, rows: list[Row], probe: Probe, throughput: float | None = None) -> list[list[str]]:
    """Table cells per stage (and a total): calls, tokens, rollouts, policy hours, $."""
    if throughput:
        probe = Probe(**{**probe.__dict__, "tokens_per_s": throughput})
    per_s, _ = compute_price(cfg)
    models = Models.of(cfg)
    cells, total = [], [0.0] * 6
    for row in rows:
        c = row.counters(probe, per_s)
        llm = stage_dollars(row.stage, c, cfg.pricing, models)
        dollars = llm.value + c["compute_dollars"]
        values = [
            c["llm_calls"],
            c["prompt_tokens"],
            c["completion_tokens"],
            c["policy_rollouts"],
            c["compute_s"] / 3600,
        ]
        total = [t + v for t, v in zip(total, [*values, dollars], strict=True)]
        cells.append([row.stage, *_cells(values), f"${dollars:,.2f}" + ("+?" if llm.unpriced else ""), row.note])
    cells.append(["total", *_cells(total[:5]), f"${total[5]:,.2f}", ""])
    return cells


def _cells(values: list[float]) -> list[str]:
    return [f"{int(v):,}" for v in values[:4]] + [f"{values[4]:.2f}"]


def estimate(cfg: Any, *, throughput: float | None = None, episodes: int = 8) -> tuple[Any, list[str]]:
    """(a rich Table of the estimate, the lines saying what it rests on) for `cfg`: the probe, then the arithmetic."""
    from rich.table import Table

    from gapforge.pricing import notes

    probe, tasks, families = probe_target(cfg, episodes)
    rows = estimate_rows(cfg, probe, tasks, families, unseen_families(cfg))
    table = Table(title=f"estimate for {cfg.rollouts.env}", title_justify="left")
    for col in "stage|llm calls|prompt tokens|completion tokens|policy rollouts|policy hours|$|how".split("|"):
        table.add_column(col)
    for cells in estimate_lines(cfg, rows, probe, throughput):
        table.add_row(*cells)
    _, compute = compute_price(cfg)
    rate = throughput or probe.tokens_per_s
    caps = cfg.analysis.max_retained or ASSUMED_CAPABILITIES
    lines = [
        f"probe: {probe.episodes} episodes of the target with the configured policy: {probe.policy_tokens:.0f} tokens "
        f"written and {probe.text_tokens:.0f} tokens of text per episode; LLM user {probe.user_prompt:.0f} prompt + "
        f"{probe.user_completion:.0f} completion tokens per episode",
        f"policy hours: tokens written at {rate:,.0f} tokens/s ({'--throughput' if throughput else 'the probe here'}); "
        f"$: {compute}",
        f"assumed: {caps} capabilities retained"
        + ("" if cfg.analysis.max_retained else " (analysis.max_retained not set)")
        + f", {(1 + cfg.synthesis.max_attempts) / 2:g} synthesis attempts each; not included: training's loss, "
        "backward and held-out evaluations, and the extra evaluations of comparisons other than GRPO on the target; the "
        "routed policy's episodes are counted as played (it copies those of the policy it routes to)",
        *notes({"cost": {r.stage: r.counters(probe, 0.0) for r in rows}}, cfg.pricing, Models.of(cfg)),
    ]
    from gapforge.errors import GapforgeError
    from gapforge.preflight import check_recorded_roles

    try:  # recorded LLM roles priced above must exist: `gapforge run` refuses them before any work (endpoints: not probed)
        check_recorded_roles(cfg)
    except GapforgeError as e:
        lines.append(f"warning: `gapforge run` refuses this config as it is: {e}")
    return table, lines
