"""The rows and files of a run's lineage for the viewer's tests and bench/ui.py: deterministic,
shaped like what the real stages store (agents/analysis, sandbox self-test, training, evaluation).

Untrusted text (the XSS probe) goes wherever an LLM or an env writes text in a real run:
a trajectory, a task id and family, label evidence, a capability definition, env code,
a self-test summary, the reviewer's notes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

PROBE = '<script>alert("xss")</script><img src=x onerror=alert(1)>[click me](javascript:alert(document.cookie))'
PROBE_TASK = "probe-<img src=x onerror=alert(1)>"
SHOP_CAPABILITIES = {
    "precondition_verification": "Before acting, the agent reads the record the action concerns and checks the policy's "
    "eligibility rules; it refuses with the reason when a precondition fails.",
    "tool_argument_precision": "The agent passes ids and values to tools exactly as the user or an earlier tool result gave them.",
    "user_confirmation": "Before a write the agent lists what it will do and obtains the user's explicit yes. " + PROBE,
}
CHECKS = (
    "loads",
    "fidelity",
    "deterministic",
    "diverse",
    "solvable",
    "not_trivial",
    "graded",
    "result_format",
    "no_leakage",
    "reward_hacking",
    "llm_review",
    "grpo_ready",
)


def capability_names(n: int) -> dict[str, str]:
    """The shop's three (two real gaps and a decoy), then generic ones up to n."""
    names = dict(list(SHOP_CAPABILITIES.items())[:n])
    for k in range(len(names), n):
        names[f"capability_{k:02d}"] = (
            f"Synthetic capability number {k}: the agent does step {k} of the procedure right."
        )
    return names


def label_of(capability: str, ep: Any, pass_index: int) -> tuple[str, str]:
    """A deterministic analyst: (value, evidence). The planted gap and generic gaps lack mostly in failures; the
    decoy lacks equally in both; one pass in five flips a few labels so κ is below 1."""
    rng = random.Random(f"{capability}:{ep.id}:{pass_index}")
    fam = ep.task_family or "-"
    if capability == "precondition_verification":
        if fam != "policy_refusal":
            return "NA", "no action needed a precondition check"
        value = "PRESENT" if ep.success else "LACKING"
    elif capability == "user_confirmation":
        value = "LACKING" if rng.random() < 0.5 else "PRESENT"
    elif capability == "tool_argument_precision":
        value = "LACKING" if not ep.success and rng.random() < 0.6 else "PRESENT"
    else:
        value = (
            "LACKING" if (not ep.success and rng.random() < 0.7) or (ep.success and rng.random() < 0.1) else "PRESENT"
        )
    if pass_index % 5 == 4 and rng.random() < 0.1:
        value = "PRESENT" if value == "LACKING" else "LACKING"
    return (
        value,
        f"[{rng.randrange(2, 12)}] {capability.replace('_', ' ')}: {'not shown' if value == 'LACKING' else 'shown'}",
    )


def probe_messages() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a shop agent. " + PROBE},
        {"role": "user", "content": "Hi " + PROBE},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_probe",
                    "name": "find_customer_by_email",
                    "arguments": {"email": '"><svg onload=alert(2)>'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_probe",
            "name": "find_customer_by_email",
            "content": json.dumps({"error": "</pre>" + PROBE}),
        },
        {"role": "assistant", "content": "Done " + PROBE},
    ]


def env_code(capability: str, attempt: int, lines: int = 180) -> str:
    """A generated env module's text (never run here): attempts differ in a constant and in the reward."""
    doc = f'"""Synthetic env for {capability}, attempt {attempt}. Untrusted text: {PROBE}"""'
    body = [
        doc,
        "",
        "from envs.sdk import SyntheticEnv, tool",
        "",
        f"WINDOW_DAYS = {30 + 5 * attempt}",
        "",
        f"class {''.join(w.title() for w in capability.split('_'))}Env(SyntheticEnv):",
        "    def generate(self, seed):",
        "        rng = self.rng(seed)",
        "        return {'orders': [rng.randint(1, 9) for _ in range(5)]}",
        "",
    ]
    for k in range(max(0, lines - len(body) - 4) // 4):
        body += [
            "    @tool",
            f"    def read_{k}(self, order_id: str) -> dict:",
            f"        return self.db['orders'].get(order_id, {{}})  # {k}",
            "",
        ]
    body += ["    def reward(self):", f"        return 1.0 if self.checked else {0.1 * attempt:.1f}", ""]
    return "\n".join(body)


def validation_report(capability: str, attempt: int, passed: bool) -> dict[str, Any]:
    """The validator's stored report (gate, self-test checks, verdict, reviewer notes, feedback)."""
    failing = set() if passed else {"result_format", "grpo_ready"}
    checks = []
    for name in CHECKS:
        ok = name not in failing
        summary = f"{name}: fine on 10 seeds" if ok else f"{name}: 3 of 10 seeds off, see the evidence"
        if name == "llm_review":
            summary = "the reviewer accepts the module" if ok else "the reviewer asks for changes: " + PROBE
        evidence = {
            "seeds": list(range(10)),
            "failing_seeds": [] if ok else [2, 5, 7],
            "note": PROBE if name == "no_leakage" else "",
        }
        if name == "llm_review":
            evidence = {
                "verdict": "accept" if ok else "revise",
                "problems": [] if ok else ["reward can be gamed by " + PROBE],
                "fixes": [] if ok else ["score only the final DB state"],
                "prompt": "synthesis_reviewer@1",
            }
        checks.append(
            {
                "name": name,
                "required": True,
                "passed": ok,
                "skipped": False,
                "summary": summary,
                "evidence": evidence,
                "seconds": 0.05,
                "verdict": "PASS" if ok else "FAIL",
            }
        )
    verdict = {
        "accepted": passed,
        "stage": "accepted" if passed else "self-test",
        "failed_checks": sorted(failing),
        "findings": [] if passed else ["result keys differ from the target's"],
        "fixes": [] if passed else ["return order_id"],
        "rollouts": 64,
    }
    return {
        "gate": {"passed": True, "problems": [], "env_class": "Env"},
        "verdict": verdict,
        "report": {
            "module": f"{capability}/attempt-{attempt}.py",
            "capability": capability,
            "seeds": 10,
            "target": "shop",
            "checks": checks,
            "passed": passed,
            "sandbox_faults": [],
            "incomplete": None,
        },
        "feedback": "accepted" if passed else "fix result_format and grpo_ready",
        "seconds": 1.5,
    }


def adapter_files(root: Path, capability: str, *, steps: int, best_step: int) -> tuple[str, dict[str, Any]]:
    """Write training's files (steps.jsonl, the kept checkpoint's metadata); return (path kept, metrics to store)."""
    rng = random.Random(capability)
    root.mkdir(parents=True, exist_ok=True)
    with (root / "steps.jsonl").open("w") as fh:
        for s in range(1, steps + 1):
            fh.write(
                json.dumps(
                    {
                        "event": "step",
                        "step": s,
                        "max_steps": steps,
                        "reward": round(0.2 + 0.03 * s + rng.random() * 0.1, 4),
                        "informative_share": round(0.5 + rng.random() * 0.5, 3),
                        "failures": [] if s % 5 else ["sandbox timeout"],
                        "gen_s": 4.0,
                        "env_s": 0.2,
                        "wall_s": 4.4,
                        "rollouts": 16,
                        "malformed_turns": s % 3,
                        "dropped_env": 0,
                        "dropped_infra": int(s % 5 == 0),
                    }
                )
                + "\n"
            )
    curve = [
        {
            "step": s,
            "reward": round(0.25 + 0.02 * s, 4),
            "rollouts": 32,
            "env_failures": 0,
            "success": None,
            **({"vs_step0": {"diff": round(0.02 * s, 4), "low": round(0.02 * s - 0.05, 4), "n": 32}} if s else {}),
        }
        for s in range(0, steps + 1, 4)
    ]
    kept = root / "evals" / f"step-{best_step:06d}"
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "gapforge_adapter.json").write_text(
        json.dumps(
            {
                "name": capability,
                "capability": capability,
                "base_model": "gapforge/demo_data/shop-policy",
                "base_model_sha256": "0" * 64,
                "env_module_sha256": "1" * 64,
                "steps": steps,
                "best_step": best_step,
                "train_tasks": list(range(64)),
                "heldout_tasks": list(range(1000, 1032)),
            }
        )
    )
    reward = {c["step"]: c["reward"] for c in curve}
    metrics = {
        "steps": steps,
        "best_step": best_step,
        "heldout_before": curve[0]["reward"],
        "heldout_after": reward.get(best_step),
        "curve": curve,
        "stopped_early": False,
        "wall_s": 60.0,
        "error": None,
    }
    return str(kept), metrics


def routing_decision(task: str, retained: list[str]) -> dict[str, Any]:
    """A router decision as agents.router's Decision.to_json stores it."""
    rng = random.Random(task)
    pick = rng.randrange(len(retained) + 1)
    letters = [chr(ord("A") + i) for i in range(len(retained) + 1)]
    cap = retained[pick] if pick < len(retained) else None
    return {
        "label": letters[pick],
        "capability": cap,
        "adapter": cap,
        "margin": round(rng.random() * 0.5, 3),
        "abstained": False,
        "logprobs": {letter: round(rng.random(), 3) for letter in letters},
    }
