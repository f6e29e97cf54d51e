"""A user's own target environment from a spec string: `package.module:ClassName` or `path/to/file.py:ClassName`,
each optionally with constructor keywords `?key=value&key2=value2` (JSON scalars when they parse, else strings).

`envs.registry.make_env` resolves the built-ins first and hands any other spec here, so every caller (collection,
synthesis, self-test, training, worker processes, Ray) loads a user's env the same way from one picklable string.
A file is imported by path under a name derived from its absolute path (re-imported when its bytes change), with
its directory on `sys.path` during the import so its siblings import. The code is trusted: it runs in this process.
Every failure is one `EnvError` line naming the fix; an exception from the user's own code is blamed on that code.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlencode

from pydantic import BaseModel, ConfigDict

from gapforge.envs.errors import EnvError

FORMS = "package.module:ClassName or path/to/file.py:ClassName"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LOCK = threading.Lock()  # imports by path are not thread-safe; episodes construct envs on worker threads
_FILE_MODULES: dict[str, tuple[str, ModuleType]] = {}  # abs path -> (sha256 of the source, module)


class ClassSpec(BaseModel):
    """A parsed `location:ClassName[?k=v...]` spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    raw: str
    kind: Literal["file", "module"]
    location: str  # the file path as given, or the dotted module name
    attr: str
    kwargs: dict[str, Any]


def _scalar(value: str) -> Any:
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if isinstance(parsed, (str, int, float, bool)) or parsed is None else value


def parse_keywords(query: str, spec: str) -> dict[str, Any]:
    """`split=dev&n=3` -> {"split": "dev", "n": 3}."""
    if not query:
        return {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise EnvError(f"bad keywords '?{query}' in env '{spec}': write them as ?key=value&key2=value2") from None
    out: dict[str, Any] = {}
    for key, value in pairs:
        if not _NAME.match(key):
            raise EnvError(f"bad keyword '{key}' in env '{spec}': a keyword is a Python parameter name")
        if key in out:
            raise EnvError(f"keyword '{key}' is given twice in env '{spec}': give it once")
        out[key] = _scalar(value)
    return out


def _encode(value: Any) -> str:
    if isinstance(value, str) and _scalar(value) == value:
        return value  # a plain string reads back as itself; "3" or "true" are quoted to stay strings
    return json.dumps(value)


def with_keywords(spec: str, args: dict[str, Any]) -> str:
    """`spec` with `args` added to its `?...` keywords (the config's `rollouts.env_args`): one plain string."""
    if not args:
        return spec
    base, _, query = spec.partition("?")
    given = parse_keywords(query, spec)
    for key, value in args.items():
        if key in given:
            raise EnvError(f"keyword '{key}' is in both the env '{spec}' and rollouts.env_args: give it once")
        if not (isinstance(value, (str, int, float, bool)) or value is None):
            raise EnvError(
                f"rollouts.env_args.{key}: a constructor keyword is a string, number, bool or null, got {type(value).__name__}"
            )
    merged = {**given, **args}
    return base + "?" + urlencode([(k, _encode(v)) for k, v in merged.items()], quote_via=quote, safe='"/:,.-')


def parse_class_spec(spec: str) -> ClassSpec:
    """`path/to/file.py:Class` or `package.module:Class` (after the built-in names; see envs.registry)."""
    base, _, query = spec.partition("?")
    if ":" not in base:
        raise EnvError(f"unknown env '{spec}': give {FORMS}")
    location, attr = base.rsplit(":", 1)
    if not _NAME.match(attr):
        raise EnvError(
            f"env '{spec}': after ':' give the environment's class name, e.g. {location or 'my_agent.env'}:MyAgentEnv"
        )
    kind = "file" if location.endswith(".py") else "module"
    if kind == "module" and (not location or not all(_NAME.match(part) for part in location.split("."))):
        raise EnvError(f"env '{spec}': '{location}' is neither a .py file nor a dotted module name: give {FORMS}")
    return ClassSpec(raw=spec, kind=kind, location=location, attr=attr, kwargs=parse_keywords(query, spec))


def _blame(spec: str, doing: str, err: BaseException) -> EnvError:
    first = str(err).splitlines()[0] if str(err) else ""
    if isinstance(err, SyntaxError):
        first = f"{err.msg} ({Path(err.filename or '?').name}, line {err.lineno})"
    return EnvError(f"env '{spec}': {doing} raised {type(err).__name__}: {first}: fix the env's code")


def _import_file(cs: ClassSpec) -> ModuleType:
    path = Path(cs.location).expanduser()
    if not path.is_file():
        raise EnvError(f"env '{cs.raw}': file '{cs.location}' not found (relative to {os.getcwd()}): fix the path")
    full = path.resolve()
    source = full.read_bytes()
    stamp = hashlib.sha256(source).hexdigest()
    with _LOCK:
        cached = _FILE_MODULES.get(str(full))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        stem = re.sub(r"\W", "_", full.stem)
        name = f"_gapforge_env_{hashlib.sha256(str(full).encode()).hexdigest()[:12]}_{stem}"
        spec = importlib.util.spec_from_file_location(name, full)
        if spec is None or spec.loader is None:
            raise EnvError(f"env '{cs.raw}': '{cs.location}' cannot be imported as a Python module: give a .py file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses, pickling and typing look the module up by name
        folder = str(full.parent)
        sys.path.insert(0, folder)  # for this import only: its siblings import, nothing of ours is shadowed later
        try:  # compiled from the bytes just read: no stale or written bytecode in the user's folder
            exec(compile(source, str(full), "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - the user's own code
        except Exception as e:
            sys.modules.pop(name, None)
            raise _blame(cs.raw, f"importing {cs.location}", e) from None
        finally:
            if folder in sys.path:
                sys.path.remove(folder)
        _FILE_MODULES[str(full)] = (stamp, module)
        return module


def _missing(err: ModuleNotFoundError, location: str) -> bool:
    return bool(err.name) and (location == err.name or location.startswith(f"{err.name}."))


def _import_module(cs: ClassSpec) -> ModuleType:
    """`importlib.import_module`; when the module is not on the import path, once more with the current directory
    appended (as `python -m` finds it: the `gapforge` script's own folder is first on the path, not the cwd)."""
    cwd = os.getcwd()
    retry = cwd not in sys.path and "" not in sys.path
    for here in (False, True) if retry else (False,):
        if here:
            sys.path.append(cwd)  # appended: nothing installed is shadowed
        try:
            return importlib.import_module(cs.location)
        except ModuleNotFoundError as e:
            if not _missing(e, cs.location):
                raise _blame(cs.raw, f"importing {cs.location}", e) from None
            missing = e.name
        except Exception as e:
            raise _blame(cs.raw, f"importing {cs.location}", e) from None
        finally:
            if here:
                sys.path.remove(cwd)
    raise EnvError(
        f"env '{cs.raw}': module '{cs.location}' not found (no '{missing}' on the import path, nor in {cwd}): "
        f"install it, add its folder to PYTHONPATH, or give path/to/file.py:{cs.attr}"
    )


def load_attr(cs: ClassSpec) -> Any:
    """What a spec names after ':' in its module (imported; one-line EnvError when absent)."""
    module = _import_file(cs) if cs.kind == "file" else _import_module(cs)
    if not hasattr(module, cs.attr):
        defined = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__)
        hint = f" (it defines: {', '.join(defined)})" if defined else " (it defines no class)"
        raise EnvError(f"env '{cs.raw}': {cs.location} has no '{cs.attr}'{hint}: fix the name after ':'")
    return getattr(module, cs.attr)


def load_class(cs: ClassSpec) -> type:
    """The class a spec names (one-line EnvError when absent or not a class)."""
    obj = load_attr(cs)
    if not inspect.isclass(obj):
        raise EnvError(
            f"env '{cs.raw}': '{cs.attr}' in {cs.location} is a {type(obj).__name__}, not a class: name the environment class"
        )
    return obj


def _user_keywords(cls: type, cs: ClassSpec, user: str, user_model: Any) -> dict[str, Any]:
    """`user=` / `user_model=` for a class that takes them; rollouts.user=llm needs a class that does."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if user == "scripted":
        return {}
    if takes_any or ("user" in params and "user_model" in params):
        return {"user": user, "user_model": user_model}
    raise EnvError(
        f"env '{cs.raw}': rollouts.user=llm, but {cls.__name__}() takes no user= and user_model= keywords: "
        "add them to its __init__ (user_model is the llm.endpoint settings), or set rollouts.user=scripted"
    )


def construct(cls: type, cs: ClassSpec, *, user: str = "scripted", user_model: Any = None) -> Any:
    """`cls(**keywords)`; a keyword it does not take is a one-line fix; its own exception is blamed on its code."""
    kwargs = {**cs.kwargs, **_user_keywords(cls, cs, user, user_model)}
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as e:
        raise EnvError(
            f"env '{cs.raw}': {cls.__name__}({', '.join(kwargs)}) does not fit its __init__ ({e}): "
            "fix the ?key=value keywords or rollouts.env_args"
        ) from None
    except ValueError:
        pass  # no signature to check (a C type): the call below says what is wrong
    try:
        env = cls(**kwargs)
    except Exception as e:
        raise _blame(cs.raw, f"{cls.__name__}({', '.join(f'{k}={v!r}' for k, v in cs.kwargs.items())})", e) from None
    if not isinstance(getattr(env, "name", None), str):
        try:
            env.name = cs.raw  # episodes name their env by the spec
        except AttributeError:
            raise EnvError(
                f"env '{cs.raw}': {cls.__name__} has a non-string 'name' that cannot be set: make it a str"
            ) from None
    return env


def source_of(env: Any) -> Path | None:
    """The file that defines an env's class (None when Python cannot tell)."""
    try:
        found = inspect.getsourcefile(type(env))
    except TypeError:
        return None
    return Path(found).resolve() if found else None
