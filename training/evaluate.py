"""Pass rates of a (base + optional adapter) policy on target tasks, through the training rollout code.

Used for the taught policy's per-family shop pass rates and for the same rates
with a trained adapter. Sampling is at the given temperature with a fixed seed,
so the same model and adapter give the same numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.rollout import EnvFactory, run_group
from training.sampler import TransformersSampler


def load_policy(model_dir: str | Path, adapter_dir: str | Path | None = None) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    from serving.chat_format import load_tokenizer

    tok = load_tokenizer(model_dir)  # the chat format training used
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False)
    model.eval()
    return model, tok


def pass_rates(model: Any, tok: Any, make_env: EnvFactory, tasks: list[Any], family_of: Any, *, samples: int = 2,
               temperature: float = 1.0, max_turns: int = 12, max_new_tokens: int = 96, seed: int = 0) -> dict[str, Any]:
    """{family: {"pass_rate", "mean_reward", "episodes"}} plus "all"."""
    from training.cpu import set_cpu_threads

    set_cpu_threads()
    sampler = TransformersSampler(model, tok, seed=seed)
    per: dict[str, list[tuple[float, bool]]] = {}
    for task in tasks:
        group = run_group(make_env, task, samples, sampler=sampler, tokenizer=tok, max_turns=max_turns,
                          max_new_tokens=max_new_tokens, max_completion_length=8192, temperature=temperature, env_timeout_s=60)
        per.setdefault(family_of(task), []).extend((r.reward, r.success) for r in group)
    per["all"] = [x for fam in list(per.values()) for x in fam]
    return {fam: {"pass_rate": sum(s for _, s in xs) / len(xs), "mean_reward": sum(r for r, _ in xs) / len(xs), "episodes": len(xs)}
            for fam, xs in per.items()}
