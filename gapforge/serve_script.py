"""The `serve.sh` of a bundle `gapforge export` writes: with a label scorer in gapforge's own process
(routing.backend=transformers) `gapforge serve --router --backend local` alone; otherwise `vllm serve` with every
adapter under the versioned name gapforge routes to (serving/vllm_backend.py `adapter_version`: nothing is loaded at
run time), the chat template and tool-call parser gapforge renders the base with, a wait until it answers, then the
routed endpoint in front of it; vLLM is stopped when the script ends. Names are quoted for sh."""

from __future__ import annotations

import shlex
from pathlib import Path

VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the --max-lora-rank values vLLM accepts
CHAT_TEMPLATE = "chat_template.jinja"


def chat_flags(base_dir: str | None) -> tuple[str | None, list[str]]:
    """(the chat template gapforge renders the base with, to write as CHAT_TEMPLATE beside serve.sh, or None when the
    base's weights are not here; vLLM's flags for it: that file, the tool-call parser, Qwen3's reasoning parser)."""
    if not base_dir or not (Path(base_dir) / "config.json").is_file():
        return None, ["--tool-call-parser", "hermes"]
    from gapforge.serving.chat_format import chat_format, load_tokenizer

    fmt = chat_format(load_tokenizer(base_dir))
    return fmt.template, [
        "--chat-template",
        f'"$HERE"/{CHAT_TEMPLATE}',
        "--tool-call-parser",
        fmt.tool_format,
        *(["--reasoning-parser", "qwen3"] if fmt.family == "qwen3" else []),
    ]


def serve_script(base: str, adapters: dict[str, Path], ranks: list[int], routing_backend: str, chat: list[str]) -> str:
    """The script: with a label scorer in gapforge's process (routing.backend=transformers) `gapforge serve --backend
    local` alone; otherwise `vllm serve` with every adapter under the name gapforge routes to, a wait until it answers,
    then the routed endpoint in front of it (vLLM stopped when the script ends)."""
    from gapforge.serving.vllm_backend import adapter_version

    head = [
        "#!/bin/sh",
        f"# Serve this gapforge bundle. BASE_DIR: a local copy of the base model {base}. Usage: BASE_DIR=... ./serve.sh",
        "set -eu",
        'HERE="$(cd "$(dirname "$0")" && pwd)"',
        ': "${BASE_DIR:?set BASE_DIR to a local copy of the base model}"',
    ]
    if routing_backend == "transformers":  # the label scorer reads the base in gapforge's process: no vLLM
        return "\n".join(
            [*head, 'exec gapforge serve --router "$HERE/router" --base "$BASE_DIR" --backend local "$@"', ""]
        )
    modules = " ".join(
        shlex.quote(f"{name}-{adapter_version(p)}=") + '"$HERE"/adapters/' + shlex.quote(name)
        for name, p in adapters.items()
    )
    rank = next((r for r in VLLM_RANKS if r >= max(ranks, default=1)), VLLM_RANKS[-1])
    url = "http://127.0.0.1:$VLLM_PORT/v1"
    return "\n".join(
        [
            *head,
            'VLLM_PORT="${VLLM_PORT:-8000}"',
            f'vllm serve "$BASE_DIR" --served-model-name {shlex.quote(base)} --enable-lora --max-lora-rank {rank} '
            f'--lora-modules {modules} --enable-auto-tool-choice {" ".join(chat)} --port "$VLLM_PORT" &',
            "VLLM_PID=$!",
            """trap 'kill "$VLLM_PID" 2>/dev/null || true' EXIT INT TERM""",
            f'echo "serve.sh: waiting for vLLM on {url}" >&2',
            f"""until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "{url}/models" 2>/dev/null; do""",
            """  kill -0 "$VLLM_PID" 2>/dev/null || { echo "serve.sh: vllm serve exited before it answered" >&2; exit 1; }""",
            "  sleep 2",
            "done",
            f'gapforge serve --router "$HERE/router" --base "$BASE_DIR" --backend vllm --vllm-url "{url}" '
            f'--vllm-model {shlex.quote(base)} "$@"',
            "",
        ]
    )
