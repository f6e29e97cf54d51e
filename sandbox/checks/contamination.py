"""Check `contamination`: a synthetic env must not reproduce held-out-only text of the target.

The target's tasks are split into an analysis split (the generator may see its episodes) and
a held-out split (evaluation reports on it). A held-out task's opening -- the first user message
of its episodes -- is *held-out-only* when no analysis-split opening shares it. An env whose
simulated user opens with, or says, such a text was written from held-out data (or copies the
evaluation's cue), so its adapter would be tested on what it was trained on.

The rule (one for "shares" and for "reproduces"): texts are normalised (NFKC, lower-cased,
words = runs of letters and digits, apostrophes kept inside words); text S reproduces text H
when H's word sequence appears inside S, or when their word overlap -- the multiset
intersection over the longer one's word count -- is at least `contamination_overlap` (0.9).
Held-out texts shorter than `contamination_min_words` words ("Hi.") are not compared.

What is compared: the first user messages of seeds 0..contamination_seeds-1 (the training
seeds too, not only the validation seeds) and every user line of the reference episodes of
the validation seeds. Evidence names the seed, where the line was said, and the held-out
task(s) whose opening it reproduces; the held-out opening itself (`heldout_text`) is stored with
the report for the user and never shown to the generator (report.NOT_FOR_GENERATOR). Without a
split the check is skipped ("no split").
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gapforge.sandbox.checks.probe import EnvFault, Probe
from gapforge.sandbox.checks.report import CheckResult
from gapforge.sandbox.checks.settings import SelfTestThresholds

NAME = "contamination"
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
MAX_MATCHES = 8


class SplitTexts(BaseModel):
    """The target's task openings by split (first user messages of the run's stored episodes)."""

    model_config = ConfigDict(extra="forbid")

    heldout: dict[str, list[str]] = Field(description="held-out task id -> the openings of its episodes")
    analysis: list[str] = Field(description="the openings of the analysis-split tasks' episodes")


def words(text: str) -> list[str]:
    """The normalised words of a text."""
    folded = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")
    return _WORD.findall(folded)


def overlap(a: list[str], b: list[str]) -> float:
    """Shared words (multiset) over the longer text's word count; 0 for an empty text."""
    longest = max(len(a), len(b))
    return sum((Counter(a) & Counter(b)).values()) / longest if longest else 0.0


def reproduces(said: list[str], held: list[str], threshold: float) -> float | None:
    """The overlap when `said` reproduces `held` (contains its word sequence, or overlaps >= threshold), else None."""
    if not held:
        return None
    score = overlap(said, held)
    if score >= threshold or f" {' '.join(held)} " in f" {' '.join(said)} ":
        return round(score, 3)
    return None


def heldout_only(split: SplitTexts, th: SelfTestThresholds) -> dict[str, tuple[list[str], list[str]]]:
    """Held-out openings no analysis opening shares: normalised text -> (its words, the held-out tasks that use it)."""
    analysis = [words(t) for t in split.analysis]
    out: dict[str, tuple[list[str], list[str]]] = {}
    for task, texts in sorted(split.heldout.items()):
        for text in texts:
            held = words(text)
            if len(held) < th.contamination_min_words:
                continue
            key = " ".join(held)
            if key in out:
                if task not in out[key][1]:
                    out[key][1].append(task)
                continue
            if not any(reproduces(a, held, th.contamination_overlap) is not None for a in analysis):
                out[key] = (held, [task])
    return out


def _user_lines(probe: Probe, seeds: list[int], opening_seeds: int) -> list[tuple[int, str, str]]:
    """(seed, where, text) of every user line the env says: openings of seeds 0..opening_seeds-1, then the
    user lines of the validation seeds' reference episodes."""
    lines: list[tuple[int, str, str]] = []
    for seed in sorted(set(range(opening_seeds)) | set(seeds)):
        env = probe.env()
        initial = probe.guard("reset", seed, env.reset, seed)
        lines += [(seed, "opening", m.content or "") for m in initial if m.role == "user"]
    for seed in seeds:
        episode = probe.reference(seed)
        for i, step in enumerate(episode.steps):
            lines += [
                (seed, f"user reply after action {i}", m.content or "") for m in step.messages if m.role == "user"
            ]
    return lines


def check_contamination(
    probe: Probe, seeds: list[int], split: SplitTexts | None, th: SelfTestThresholds
) -> CheckResult:
    if split is None:
        return CheckResult.skip(
            NAME, "skipped: no split (give the run whose target split to guard: --episodes-from RUN)"
        )
    held = heldout_only(split, th)
    if not held:
        return CheckResult.ok(
            NAME,
            f"no held-out-only opening to compare: the {sum(map(len, split.heldout.values()))} held-out "
            "opening(s) are all shared with the analysis split or too short",
            heldout_only=0,
        )
    try:
        lines = _user_lines(probe, seeds, th.contamination_seeds)
    except EnvFault as fault:
        return CheckResult.fail(NAME, f"could not collect the env's user lines: {fault.describe()}", **fault.evidence())
    found: dict[str, dict[str, Any]] = {}  # held-out text -> the first line reproducing it, and every seed that does
    for seed, where, text in lines:
        said = words(text)
        for key, (held_words, tasks) in held.items():
            score = reproduces(said, held_words, th.contamination_overlap)
            if score is None:
                continue
            match = found.setdefault(
                key,
                {
                    "seed": seed,
                    "where": where,
                    "said": text[:300],
                    "heldout_tasks": tasks,
                    "heldout_text": key[:300],
                    "overlap": score,
                    "seeds": [],
                    "lines": 0,
                },
            )
            match["lines"] += 1
            if seed not in match["seeds"]:
                match["seeds"].append(seed)
    matches = list(found.values())
    evidence = {
        "heldout_only": len(held),
        "lines_compared": len(lines),
        "rule": f"contains, or word overlap >= {th.contamination_overlap}",
    }
    if matches:
        first = matches[0]
        return CheckResult.fail(
            NAME,
            f"{len(matches)} held-out-only opening(s) of the target reproduced: seed {first['seed']}'s {first['where']} "
            f"{first['said'][:120]!r} matches held-out task {', '.join(first['heldout_tasks'][:3])} (overlap {first['overlap']:.2f}); "
            "reword it in the words of the analysis split's episodes",
            matches=matches[:MAX_MATCHES],
            **evidence,
        )
    return CheckResult.ok(
        NAME, f"none of {len(lines)} user line(s) reproduces any of {len(held)} held-out-only opening(s)", **evidence
    )
