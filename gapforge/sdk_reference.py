"""The SDK reference page (docs/sdk.md), generated from prompts/sdk_reference.md: the text the synthesis generator reads
in its prompt is the page a person reads, so the two never drift. tests/agents/synthesis/test_sdk_reference.py keeps
that text equal to envs/sdk.py's public API; tests/gapforge/test_sdk_docs.py fails when the page is stale.

    python -m gapforge.sdk_reference > docs/sdk.md
"""

from __future__ import annotations

from gapforge.prompts import load_prompt

REGENERATE = "python -m gapforge.sdk_reference > docs/sdk.md"
PROMPT_FILE = "sdk_reference.md"
EXAMPLES = ("precondition_verification.py", "structured_data_reasoning.py")
HAND_WRITTEN = "your-agent.md#10-offline-write-a-synthetic-env-by-hand-validate-it-train-on-it"  # the steps, in docs/


def render() -> str:
    """docs/sdk.md: a short introduction for people, then the prompt's reference text unchanged."""
    prompt = load_prompt(PROMPT_FILE)
    title, _, reference = prompt.body.strip().partition("\n")
    examples = " and ".join(f"[`envs/examples/{name}`](../envs/examples/{name})" for name in EXAMPLES)
    out = [
        title,
        "",
        f"Generated from `prompts/{PROMPT_FILE}` (`{prompt.id}`), the reference the synthesis generator reads in its prompt,",
        f"by `{REGENERATE}`; `tests/gapforge/test_sdk_docs.py` fails when this page is stale and",
        "`tests/agents/synthesis/test_sdk_reference.py` when the reference and `envs/sdk.py` disagree.",
        "",
        "A synthetic training env is one Python module with one subclass of `SyntheticEnv`. gapforge writes such",
        "modules itself (the `synthesize` stage); you can also write one by hand, check it with `gapforge env validate`",
        "and train an adapter on it with `gapforge train RUN --module PATH`: the steps are in",
        f"[your-agent.md]({HAND_WRITTEN}).",
        "The module runs in the sandbox, where the SDK is `envs.sdk` and nothing else of gapforge exists: import it",
        "as `envs.sdk` (loaded on the host, the same name stands for `gapforge.envs.sdk`). Two complete modules:",
        f"{examples}.",
        "",
        reference.strip(),
    ]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
