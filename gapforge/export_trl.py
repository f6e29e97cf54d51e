"""`gapforge export RUN DIR --trl`: each accepted synthetic env of a run as a TRL environment, for TRL's own
GRPOTrainer (`environment_factory`), in `DIR/trl/CAPABILITY/`:

    trl_env.py        the adapter: `SyntheticEnv`, TRL's env class over the synthetic env (ADAPTER below)
    synthetic_env.py  the accepted env module, as validated (code an LLM wrote)
    envs/sdk.py       gapforge's synthetic-env SDK (standard library only), which the module imports
    dataset.jsonl     one row per training seed: `prompt` (the env's system prompt and opening) and `seed`
    README.md         how to train on it, and what the mapping loses

The rows are read in the sandbox (the env's `reset(seed)`), as everything gapforge does with LLM-written code;
training on the export runs that code in the trainer's process: the README says so. The mapping (TRL has no user
turns, and a text turn ends its rollout unseen by the env): every tool of the env is a method; `say_to_user(text)`
sends text to the env's scripted user and returns the reply; `get_reward()` is the env's reward. A reward component
over what the agent said counts only what it said through `say_to_user`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.errors import UsageError

if TYPE_CHECKING:
    from gapforge.config import GapforgeConfig
    from gapforge.store import Store

SAY = "say_to_user"
RESERVED = ("reset", "get_reward", SAY)

# The adapter every export ships (no text of the env in it: the tools are read from the env class at import).
ADAPTER = '''"""TRL environment_factory over a gapforge synthetic env (written by `gapforge export --trl`).

    import importlib.util
    spec = importlib.util.spec_from_file_location("my_env", "THIS_DIR/trl_env.py")
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    GRPOTrainer(..., train_dataset=load_dataset("json", data_files="THIS_DIR/dataset.jsonl")["train"],
                environment_factory=module.SyntheticEnv)

It runs synthetic_env.py, code an LLM wrote, in this process (gapforge ran it only in its sandbox). Its
`from envs.sdk import ...` gets envs/sdk.py beside it, under names of its own: other exports, and a package of yours
called `envs`, are left as they were.
"""

import importlib.util
import inspect
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
_KEY = f"gapforge_trl_{abs(hash(str(HERE)))}"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_sdk = _load(f"{_KEY}_sdk", HERE / "envs" / "sdk.py")
_saved = {k: sys.modules.get(k) for k in ("envs", "envs.sdk")}
_package = types.ModuleType("envs")
_package.sdk = _sdk
sys.modules.update({"envs": _package, "envs.sdk": _sdk})
try:
    synthetic_env = _load(f"{_KEY}_env", HERE / "synthetic_env.py")
finally:
    for _name, _module in _saved.items():
        if _module is None:
            sys.modules.pop(_name, None)
        else:
            sys.modules[_name] = _module
find_env_class, message = _sdk.find_env_class, _sdk.message

ENV_CLASS = find_env_class(synthetic_env)
TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


class SyntheticEnv:
    """One episode of the env per rollout: reset(seed=..., **row), its tools, say_to_user, get_reward."""

    def __init__(self):
        self._env = ENV_CLASS()
        self._calls = 0

    def reset(self, seed=0, **row):
        self._env.reset(int(seed))
        self._calls = 0
        return None  # the row's prompt is the env's system prompt and opening

    def _step(self, msg):
        out = self._env.step(msg)
        text = "\\n".join(m.get("content") or "" for m in out["messages"])
        return text or ("(the episode is over)" if out["done"] else "")

    def _call(self, name, arguments):
        self._calls += 1
        call = {"id": f"call_{self._calls}", "name": name, "arguments": arguments}
        return self._step(message("assistant", None, tool_calls=[call]))

    def say_to_user(self, text: str) -> str:
        """Say something to the user and get their reply.

        Args:
            text: what to say to the user.
        """
        return self._step(message("assistant", text))

    def get_reward(self) -> float:
        return float(self._env.score()["reward"])


def _tool(schema):
    fn_schema = schema["function"]
    name, props = fn_schema["name"], fn_schema.get("parameters", {}).get("properties", {})
    required = set(fn_schema.get("parameters", {}).get("required", []))

    def tool(self, **kwargs):
        return self._call(name, {k: v for k, v in kwargs.items() if v is not None or k in required})

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    notes = {n: {"annotation": TYPES.get(p.get("type"), str)} for n, p in props.items()}
    for n in sorted(props, key=lambda n: n not in required):
        default = inspect.Parameter.empty if n in required else None
        annotation = notes[n]["annotation"] if n in required else notes[n]["annotation"] | None
        params.append(inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
        notes[n]["annotation"] = annotation
    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = inspect.Signature(params, return_annotation=str)
    tool.__annotations__ = {**{n: v["annotation"] for n, v in notes.items()}, "return": str}

    def one_line(text):
        return " ".join(str(text or "").split()) or "-"

    def arg(n, p):
        choices = f" (one of: {', '.join(map(str, p['enum']))})" if p.get("enum") else ""
        return f"    {n}: {one_line(p.get('description') or n)}{choices}"

    args = [arg(n, p) for n, p in props.items()]
    tool.__doc__ = one_line(fn_schema.get("description")) + ("\\n\\nArgs:\\n" + "\\n".join(args) if args else "")
    return tool


for _schema in ENV_CLASS().tools():
    setattr(SyntheticEnv, _schema["function"]["name"], _tool(_schema))
'''


def _readme(capability: str, run_id: str, rows: int) -> str:
    return f"""# `{capability}` as a TRL environment

The synthetic env gapforge wrote and validated for the capability `{capability}` in run `{run_id}`, for TRL's
`GRPOTrainer(environment_factory=...)` (experimental in TRL 1.16):

```python
import sys; sys.path.insert(0, "path/to/this/dir")
from datasets import load_dataset
from trl_env import SyntheticEnv
rows = load_dataset("json", data_files="path/to/this/dir/dataset.jsonl")["train"]  # {rows} rows: prompt, seed
trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=rows, environment_factory=SyntheticEnv)
```

**Untrusted code.** `synthetic_env.py` was written by an LLM. gapforge only ever ran it in its Docker sandbox;
TRL runs it in the trainer's own process. Read it first.

What the mapping keeps and loses: each tool of the env is a method of `SyntheticEnv`; `reset(seed=...)` starts the
row's episode (the prompt already holds its system prompt and opening); `get_reward()` is the env's reward. TRL has
no user turns, so the env's scripted user answers through the tool `say_to_user(text)`, and TRL ends a rollout at the
first text turn without showing it to the env: a reward component over what the agent said counts only what it said
through `say_to_user`. Needs a chat template TRL recognises for tool calls (e.g. Qwen3's).
"""


def export_trl_envs(
    store: Store,
    run_id: str,
    out: Path,
    cfg: GapforgeConfig,
    capabilities: list[str],
    *,
    open_env: Callable[[Path], Any],
    say: Callable[[str], None] = lambda line: None,
) -> list[str]:
    """Write `out/trl/CAPABILITY/` for each capability's accepted env (module doc); `open_env(module)`: the env in
    the sandbox. Returns the capabilities written; UsageError (one line) for a tool name a Python method cannot have."""
    from gapforge.envs import sdk
    from gapforge.store.workspace import Workspace

    ws, seeds = Workspace(Path(cfg.workspace)), list(range(cfg.training.train_seeds))
    done = []
    for cap in capabilities:
        module = ws.synthetic_env(run_id, cap)
        if not module.is_file():
            say(f"trl: {cap}: no accepted env module in the workspace: left out")
            continue
        env = open_env(module)
        try:
            names = [t["function"]["name"] for t in env.tools()]
            bad = [n for n in names if not n.isidentifier() or n.startswith("_") or n in RESERVED]
            if bad:
                raise UsageError(f"the env of {cap} has a tool named {bad[0]!r}, which a TRL env method cannot be")
            rows = []
            for seed in seeds:
                messages = env.reset(seed)
                rows.append({"prompt": [{"role": m.role, "content": m.content} for m in messages], "seed": seed})
        finally:
            env.close()
        where = out / "trl" / cap
        (where / "envs").mkdir(parents=True)
        (where / "envs" / "__init__.py").write_text("", encoding="utf-8")
        shutil.copyfile(sdk.__file__, where / "envs" / "sdk.py")
        shutil.copyfile(module, where / "synthetic_env.py")
        (where / "trl_env.py").write_text(ADAPTER, encoding="utf-8")
        (where / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        (where / "README.md").write_text(_readme(cap, run_id, len(rows)), encoding="utf-8")
        say(f"trl: {cap}: {len(names)} tools + {SAY}, {len(rows)} rows (LLM-written code: read trl/{cap}/README.md)")
        done.append(cap)
    return done
