"""The synthetic-environment SDK: the base class every synthetic env module subclasses.

STANDARD LIBRARY ONLY. This one file is copied into the bare sandbox image as
`envs/sdk.py` (beside an empty `envs/__init__.py`); nothing else of ours exists there.

The author API (one module, exactly one `SyntheticEnv` subclass with `@tool` methods, `generate`, `reward`,
`solution`, optionally `user_reply`) and the state the SDK keeps (`rng`, `scenario`, `db`, `calls`, `said`,
`transcript`, `state`, `turns`, `done`, all fresh at every reset) are documented in prompts/sdk_reference.md
(docs/sdk.md), which tests keep equal to this file's public API; a complete example is
envs/examples/precondition_verification.py.

Runtime API (used by the sandbox server, validators and envs.synthetic): tools(),
reset(seed), step(message), score(), solution(seed), scenario_for(seed), metadata();
module helpers find_env_class(module) and action_to_message(action, call_id). Messages
are dicts shaped like envs.protocol.Message.model_dump(mode="json").
"""

from __future__ import annotations

import copy
import enum
import inspect
import json
import random
import re
import types
import typing
from typing import Any, Callable

__all__ = [
    "SyntheticEnv",
    "tool",
    "ToolError",
    "EnvDefinitionError",
    "ProtocolError",
    "find_env_class",
    "action_to_message",
    "message",
    "SUCCESS_THRESHOLD",
]

SUCCESS_THRESHOLD = 0.999
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_RUNTIME_NAMES = frozenset(
    "tools reset step score solution scenario_for metadata generate user_reply reward "
    "system_prompt called calls_to tool_specs check_definition".split()
)
_MARK = "__sdk_tool__"


class ToolError(Exception):
    """Raise inside a tool for an expected failure ("order not found"); the agent sees 'Error: <message>'."""


class _CallError(ToolError):
    """A tool call the SDK rejects before the tool runs (unknown tool, bad arguments)."""

    def __init__(self, text: str, kind: str) -> None:
        super().__init__(text)
        self.kind = kind


class EnvDefinitionError(Exception):
    """The env class or its output breaks the SDK's rules (bad tool signature, bad reward, ...)."""


class ProtocolError(ValueError):
    """The caller broke the runtime API (step before reset, a non-assistant message, a bad seed)."""


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Mark a method as a tool: its typed parameters (str, int, float, bool, list[X], dict, Literal[...], an Enum,
    `X | None` or a default: optional) and docstring (first paragraph; `Args:` section) become its OpenAI schema."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(f, _MARK, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


def message(
    role: str,
    content: str | None = None,
    *,
    tool_calls: list[dict] | None = None,
    tool_call_id: str | None = None,
    name: str | None = None,
) -> dict:
    """A message dict in the shape of envs.protocol.Message.model_dump(mode="json")."""
    return dict(role=role, content=content, tool_calls=list(tool_calls or []), tool_call_id=tool_call_id, name=name)


def action_to_message(action: dict, call_id: str) -> dict:
    """A reference action ({"tool": name, "arguments": {...}} or {"say": text}) as an assistant message: the one
    conversion in-process and sandboxed envs and the self-test (sandbox.checks.probe) use."""
    if not isinstance(action, dict):
        raise ProtocolError(f"an action must be a dict, got {type(action).__name__}")
    if "tool" in action:
        if not isinstance(action["tool"], str):
            raise ProtocolError(f"action 'tool' must be a tool name (string), got {action['tool']!r}"[:300])
        args = action.get("arguments") or {}
        if not isinstance(args, dict):
            raise ProtocolError(f"action arguments must be a dict, got {type(args).__name__}")
        call = {"id": call_id, "name": action["tool"], "arguments": copy.deepcopy(args)}
        return message("assistant", None, tool_calls=[call])
    if "say" in action:
        if not isinstance(action["say"], str):
            raise ProtocolError(f"action 'say' must be text (string), got {type(action['say']).__name__}")
        return message("assistant", action["say"])
    raise ProtocolError(f"an action needs a 'tool' or a 'say' key, got keys {sorted(action)}")


def find_env_class(module: types.ModuleType) -> type[SyntheticEnv]:
    """The one module-level SyntheticEnv subclass of `module`, checked; errors if zero or several."""
    found = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, SyntheticEnv) and v is not SyntheticEnv
    ]
    if not found:
        raise EnvDefinitionError(f"module {module.__name__} defines no subclass of envs.sdk.SyntheticEnv")
    if len(found) > 1:
        names = ", ".join(sorted(c.__name__ for c in found))
        raise EnvDefinitionError(
            f"module {module.__name__} defines several SyntheticEnv subclasses ({names}); keep exactly one"
        )
    found[0].check_definition()
    return found[0]


def _is_optional(tp: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(typing.get_args(tp)):
            return True, rest[0]
    return False, tp


def _json_type(values: list[Any], where: str) -> str:
    kinds = {type(v) for v in values}
    for py, js in ((str, "string"), (bool, "boolean"), (int, "integer"), (float, "number")):
        if kinds == {py}:
            return js
    raise EnvDefinitionError(f"{where}: enum/Literal values must all be str, or all int ({values!r})")


def _schema_for(tp: Any, where: str) -> dict:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if tp in simple:
        return {"type": simple[tp]}
    if tp is dict or origin is dict:
        return {"type": "object"}
    if tp is list or origin is list:
        return {"type": "array", "items": _schema_for(args[0], where)} if args else {"type": "array"}
    if origin is typing.Literal:
        return {"type": _json_type(list(args), where), "enum": list(args)}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        return {"type": _json_type(values, where), "enum": values}
    raise EnvDefinitionError(
        f"{where}: unsupported type {tp!r}; use str, int, float, bool, list[X], dict, Literal[...], an Enum or X | None"
    )


_SECTIONS = {"args", "arguments", "parameters", "returns", "raises", "example", "examples"}


def function_schema(name: str, description: str, properties: dict, required: list[str]) -> dict:
    """An OpenAI function-tool schema (envs.protocol.tool_schema builds the target envs' tools with it)."""
    parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    section, current = "desc", None
    for line in lines:
        head = line.strip().rstrip(":").lower()
        if line and not line[0].isspace() and line.strip().endswith(":") and head in _SECTIONS:
            section, current = head, None
            continue
        if section == "desc":
            desc.append(line)
        elif section in {"args", "arguments", "parameters"}:
            m = re.match(r"^\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if m:
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
    text = " ".join(" ".join(desc).split())
    return text, params


class _ToolSpec:
    def __init__(self, name: str, attr: str, fn: Callable[..., Any], owner: type) -> None:
        where = f"{owner.__name__}.{attr}"
        if not _TOOL_NAME.match(name) or name in _RUNTIME_NAMES:
            raise EnvDefinitionError(f"{where}: tool name {name!r} is invalid or clashes with the SDK's runtime API")
        if not fn.__doc__ or not fn.__doc__.strip():
            raise EnvDefinitionError(f"{where}: a tool needs a docstring (its first paragraph is the description)")
        try:
            hints = typing.get_type_hints(fn)
        except Exception as exc:  # unresolved annotation names
            raise EnvDefinitionError(f"{where}: cannot resolve type annotations ({exc})") from None
        description, param_docs = _parse_docstring(fn.__doc__)
        self.name, self.attr, self.params = name, attr, {}
        properties: dict[str, dict] = {}
        required: list[str] = []
        for p in list(inspect.signature(fn).parameters.values())[1:]:
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise EnvDefinitionError(f"{where}: *args/**kwargs are not allowed in tools (parameter {p.name})")
            if p.name not in hints:
                raise EnvDefinitionError(f"{where}: parameter {p.name!r} needs a type annotation")
            optional, inner = _is_optional(hints[p.name])
            prop = _schema_for(inner, f"{where}({p.name})")
            if param_docs.get(p.name):
                prop["description"] = param_docs[p.name]
            properties[p.name] = prop
            has_default = p.default is not inspect.Parameter.empty
            if not has_default and not optional:
                required.append(p.name)
            self.params[p.name] = (inner, has_default or optional)
        self.schema = function_schema(name, description, properties, required)

    def coerce(self, arguments: dict) -> dict:
        """Checked keyword arguments, or ToolError saying what is wrong."""
        unknown = sorted(set(arguments) - set(self.params))
        if unknown:
            raise _CallError(
                f"unknown argument(s) {unknown} for {self.name}; expected {sorted(self.params)}", "bad_arguments"
            )
        missing = [n for n, (_, opt) in self.params.items() if not opt and n not in arguments]
        if missing:
            raise _CallError(f"missing required argument(s) {missing} for {self.name}", "bad_arguments")
        try:
            return {n: _coerce(v, self.params[n][0], n) for n, v in arguments.items()}
        except ToolError as exc:
            raise _CallError(str(exc), "bad_arguments") from None


def _coerce(value: Any, tp: Any, name: str) -> Any:
    optional, tp = _is_optional(tp)
    if value is None and optional:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    ok: bool
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    elif tp is dict or origin is dict:
        ok = isinstance(value, dict)
    elif tp is list or origin is list:
        if not isinstance(value, list):
            raise ToolError(f"argument {name!r} must be a list, got {json.dumps(value)}")
        return [_coerce(v, args[0], f"{name}[{i}]") for i, v in enumerate(value)] if args else list(value)
    elif origin is typing.Literal:
        ok = value in args and type(value) in {type(a) for a in args}
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise ToolError(
                f"argument {name!r} must be one of {[m.value for m in tp]}, got {json.dumps(value)}"
            ) from None
    else:
        ok = False
    if not ok:
        expected = _schema_for(tp, name).get("enum") or _schema_for(tp, name)["type"]
        raise ToolError(f"argument {name!r} must be {expected}, got {json.dumps(value)}")
    return value


def _jsonable(value: Any, what: str) -> Any:
    """A deep, JSON-round-tripped copy (raises EnvDefinitionError if not JSON-serializable)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise EnvDefinitionError(f"{what} must be JSON-serializable: {exc}") from None


def _check_actions(actions: Any) -> list[dict]:
    if not isinstance(actions, list):
        raise EnvDefinitionError(f"solution() must return a list of actions, got {type(actions).__name__}")
    for i, a in enumerate(actions):
        is_call = isinstance(a, dict) and set(a) <= {"tool", "arguments"} and isinstance(a.get("tool"), str)
        is_say = isinstance(a, dict) and set(a) == {"say"} and isinstance(a["say"], str)
        if not ((is_call and isinstance(a.get("arguments", {}), dict)) or is_say):
            raise EnvDefinitionError(
                f"solution() action {i} must be {{'tool': name, 'arguments': {{...}}}} or {{'say': text}}, got {a!r}"
            )
    return [
        {"tool": a["tool"], "arguments": a.get("arguments", {})} if "tool" in a else dict(a)
        for a in _jsonable(actions, "solution()'s actions")
    ]


def _parse_call(call: Any, fallback_id: str) -> tuple[str, str, Any]:
    """(id, name, arguments-or-error-string) from a protocol or OpenAI-wire tool call."""
    if not isinstance(call, dict):
        return fallback_id, "", "a tool call must be an object"
    fn = call.get("function") if isinstance(call.get("function"), dict) else call
    call_id = str(call.get("id") or fallback_id)
    name, args = fn.get("name"), fn.get("arguments", {})
    if not isinstance(name, str) or not name:
        return call_id, "", "a tool call needs a name"
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            return call_id, name, f"arguments are not valid JSON ({exc})"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return call_id, name, "arguments must be a JSON object"
    return call_id, name, args


class SyntheticEnv:
    """Base class of a synthetic env. Subclass once per module; see the module docstring."""

    capability: str = ""
    description: str = ""
    target: str = ""
    policy: str = ""
    weights: dict[str, float] = {}
    max_turns: int = 30
    success_threshold: float = SUCCESS_THRESHOLD

    def __init__(self) -> None:
        self.seed: int | None = None
        self.rng = random.Random(0)
        self.scenario: dict = {}
        self.db: Any = {}
        self.calls: list[dict] = []
        self.said: list[dict] = []
        self.transcript: list[dict] = []
        self.state: dict[str, Any] = {}
        self.turns = 0
        self.done = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        author = cls.__dict__.get("solution")
        if inspect.isfunction(author):

            def solution(self: SyntheticEnv, seed: int) -> list[dict]:
                scratch = type(self)()
                scratch.reset(seed)
                return _check_actions(author(scratch, seed))

            solution.__doc__ = author.__doc__
            cls.solution = solution  # type: ignore[method-assign]

    def generate(self, seed: int) -> dict:
        """The scenario for `seed`: {"opening": first user message, "db": records tools act on, ...}; use only
        `self.rng` (already seeded), never time, global random, files or network."""
        raise NotImplementedError

    def user_reply(self, text: str) -> str | None:
        """The scripted user's answer to the agent's text; None ends the conversation."""
        return None

    def reward(self) -> dict[str, float]:
        """Named reward components, each in [0, 1]; combined by a weighted mean with `weights`."""
        raise NotImplementedError

    def solution(self, seed: int) -> list[dict]:
        """Reference actions for `seed`: [{"tool": name, "arguments": {...}} | {"say": text}, ...]."""
        raise NotImplementedError

    def system_prompt(self) -> str:
        """The system message; `policy` by default (override to add scenario facts)."""
        return self.policy

    def calls_to(self, tool: str, /, **arguments: Any) -> list[dict]:
        """Successful calls of `tool` whose arguments include the given values. The tool name is positional-only,
        so any argument name can be matched, `name` and `tool` included: `calls_to("rename", name="x")`."""
        return [
            c
            for c in self.calls
            if c["ok"] and c["name"] == tool and all(c["arguments"].get(k) == v for k, v in arguments.items())
        ]

    def called(self, tool: str, /, **arguments: Any) -> bool:
        """Whether `tool` succeeded at least once with (at least) these argument values (`tool` positional-only)."""
        return bool(self.calls_to(tool, **arguments))

    @classmethod
    def tool_specs(cls) -> dict[str, _ToolSpec]:
        cached = cls.__dict__.get("_sdk_specs")
        if cached is not None:
            return cached
        specs: dict[str, _ToolSpec] = {}
        attrs = list(dict.fromkeys(a for k in reversed(cls.__mro__) for a in vars(k)))
        for attr in attrs:
            fn = getattr(cls, attr, None)
            name = getattr(fn, _MARK, None) if inspect.isfunction(fn) else None
            if name is None:
                continue
            if name in specs:
                raise EnvDefinitionError(f"{cls.__name__}: two tools are named {name!r}")
            specs[name] = _ToolSpec(name, attr, fn, cls)
        cls._sdk_specs = specs
        return specs

    @classmethod
    def check_definition(cls) -> None:
        """Raise EnvDefinitionError naming the first broken rule of the class definition."""
        n = cls.__name__
        if not isinstance(cls.capability, str) or not _SNAKE.match(cls.capability):
            raise EnvDefinitionError(f"{n}.capability must be a snake_case string, got {cls.capability!r}")
        for attr in ("description", "target", "policy"):
            if not isinstance(getattr(cls, attr), str) or not getattr(cls, attr).strip():
                raise EnvDefinitionError(f"{n}.{attr} must be a non-empty string")
        if not isinstance(cls.weights, dict) or any(
            not isinstance(w, (int, float)) or isinstance(w, bool) or w < 0 for w in cls.weights.values()
        ):
            raise EnvDefinitionError(f"{n}.weights must map component names to numbers >= 0")
        if not isinstance(cls.max_turns, int) or cls.max_turns < 1:
            raise EnvDefinitionError(f"{n}.max_turns must be an int >= 1")
        for hook in ("generate", "reward", "solution"):
            if getattr(cls, hook) is getattr(SyntheticEnv, hook):
                raise EnvDefinitionError(f"{n} must implement {hook}()")
        if not cls.tool_specs():
            raise EnvDefinitionError(f"{n} defines no tools; mark tool methods with @tool")

    @classmethod
    def metadata(cls) -> dict:
        return {
            "name": cls.__name__,
            "capability": cls.capability,
            "description": cls.description,
            "target": cls.target,
            "max_turns": cls.max_turns,
            "tools": [copy.deepcopy(s.schema) for s in cls.tool_specs().values()],
        }

    def tools(self) -> list[dict]:
        return [copy.deepcopy(s.schema) for s in self.tool_specs().values()]

    def reset(self, seed: int) -> list[dict]:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ProtocolError(f"a synthetic env is reset with an integer seed, got {seed!r}")
        SyntheticEnv.__init__(self)
        self.seed, self.rng = seed, random.Random(seed)
        scenario = self.generate(seed)
        if not isinstance(scenario, dict):
            raise EnvDefinitionError(f"generate() must return a dict, got {type(scenario).__name__}")
        _jsonable(scenario, "generate()'s scenario")
        self.scenario = copy.deepcopy(scenario)
        opening = self.scenario.get("opening")
        if not isinstance(opening, str) or not opening.strip():
            raise EnvDefinitionError("generate() must return an 'opening' key: the user's first message (a string)")
        self.db = copy.deepcopy(self.scenario.get("db", {}))
        system = self.system_prompt()
        if not isinstance(system, str) or not system.strip():
            raise EnvDefinitionError("system_prompt() must return a non-empty string (set `policy`)")
        self.transcript = [message("system", system), message("user", opening)]
        return copy.deepcopy(self.transcript)

    def step(self, msg: dict) -> dict:
        if self.seed is None:
            raise ProtocolError("step() before reset(seed)")
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            raise ProtocolError("step() takes one assistant message dict (role 'assistant')")
        if self.done:
            return {"messages": [], "done": True, "info": {"reason": "episode already over"}}
        self.turns += 1
        calls = msg.get("tool_calls") or []
        info: dict[str, Any] = {"turn": self.turns, "tool_errors": []}
        out: list[dict] = []
        parsed = [_parse_call(c, f"call_{self.turns}_{i}") for i, c in enumerate(calls)]
        shown = [dict(id=i, name=n, arguments=a if isinstance(a, dict) else {}) for i, n, a in parsed]
        self.transcript.append(message("assistant", msg.get("content"), tool_calls=shown))
        if parsed:
            out = [self._run_tool(call_id, name, args, info) for call_id, name, args in parsed]
            if self.done:
                info["reason"] = "env_ended"
        else:
            text = msg.get("content") or ""
            self.said.append({"turn": self.turns, "text": str(text)})
            reply = self.user_reply(str(text))
            if reply is None:
                self.done, info["reason"] = True, "user_ended"
            elif not isinstance(reply, str):
                raise EnvDefinitionError(f"user_reply() must return a string or None, got {type(reply).__name__}")
            else:
                out = [message("user", reply)]
        if not self.done and self.turns >= self.max_turns:
            self.done, info["reason"] = True, "max_turns"
        self.transcript.extend(out)
        return {"messages": copy.deepcopy(out), "done": self.done, "info": info}

    def _run_tool(self, call_id: str, name: str, args: Any, info: dict) -> dict:
        record = dict(turn=self.turns, name=name, arguments=args if isinstance(args, dict) else {}, ok=False, result="")
        spec = self.tool_specs().get(name)
        snapshot = copy.deepcopy(self.db)
        try:
            if isinstance(args, str):
                raise _CallError(args, "bad_arguments")
            if spec is None:
                raise _CallError(f"unknown tool {name!r}; available tools: {sorted(self.tool_specs())}", "unknown_tool")
            result = getattr(self, spec.attr)(**spec.coerce(args))
            content = result if isinstance(result, str) else json.dumps(result, sort_keys=True)
            record.update(ok=True, result=content)
        except ToolError as exc:
            self.db = snapshot
            content = f"Error: {exc}"
            kind = exc.kind if isinstance(exc, _CallError) else "tool_error"
            info["tool_errors"].append({"tool": name, "kind": kind, "message": str(exc)})
        except Exception as exc:  # an env bug: the agent sees it, the validator sees the kind
            self.db = snapshot
            content = f"Error: {type(exc).__name__}: {exc}"
            info["tool_errors"].append({"tool": name, "kind": "exception", "message": content})
        record["result"] = content
        self.calls.append(record)
        return message("tool", content, tool_call_id=call_id, name=name or None)

    def score(self) -> dict:
        if self.seed is None:
            raise ProtocolError("score() before reset(seed)")
        comps = self.reward()
        if not isinstance(comps, dict) or not comps:
            raise EnvDefinitionError("reward() must return a non-empty dict of component name -> value in [0, 1]")
        clean: dict[str, float] = {}
        for k, v in comps.items():
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not isinstance(k, str) or not number or not (-1e-9 <= v <= 1 + 1e-9):
                raise EnvDefinitionError(f"reward() component {k!r} must be a number in [0, 1], got {v!r}")
            clean[k] = min(1.0, max(0.0, float(v)))
        weights = {k: float(self.weights.get(k, 1.0)) for k in clean}
        total = sum(weights.values())
        if total <= 0:
            raise EnvDefinitionError("the weights of the reward components sum to 0")
        value = min(1.0, max(0.0, sum(weights[k] * clean[k] for k in clean) / total))
        return {
            "reward": value,
            "success": value >= self.success_threshold,
            "components": clean,
            "info": {"weights": weights, "turns": self.turns, "done": self.done},
        }

    def scenario_for(self, seed: int) -> dict:
        """The JSON scenario `generate(seed)` makes, on a fresh instance (the episode is untouched)."""
        scratch = type(self)()
        scratch.reset(seed)
        return _jsonable(scratch.scenario, "generate()'s scenario")
