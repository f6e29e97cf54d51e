"""The config a command that reads a run works with: the run's stored config, with this invocation's explicit settings
on top, and the list of what those settings changed.

What was evaluated is what is served: `gapforge evaluate / serve / adapters / report / synthesize / train / analyze RUN`
start from the effective config the run stored (gapforge/run_session.py `run_record`; `rollouts collect` stores it too,
with its `--policy` spec beside it). On top of it go, in this order, the keys of `--config FILE`, the config's env vars,
`--set` and the command's own flags (e.g. `serve --base DIR` = `policy.local_path=DIR`); `overridden` names every
setting whose value differs from the run's. Where this invocation works, not what the run is, always comes from the
invocation: `workspace`, `store`, `executor`. A URL the run stored with its password masked must be given again by the
invocation (`--config`, an env var, `--set`); else the command stops with one line naming the key.

A run that stores no config (an evaluation's child run, or one made by hand) uses the invocation's config, and `note`
says so. A store made by an older gapforge is refused when it opens (store/models.py SCHEMA_VERSION).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gapforge.config import ConfigError, GapforgeConfig, load_config, parse_override
from gapforge.store.redact import is_redacted

WHERE_KEYS = ("workspace", "store", "executor")  # where this invocation works: never the run's


@dataclass(frozen=True)
class RunConfig:
    cfg: GapforgeConfig
    overridden: list[tuple[str, Any, Any]] = field(default_factory=list)  # (dotted key, now, the run's)
    note: str = ""  # set when the run stores no config

    def lines(self) -> list[str]:
        """What to print before work: the one override line, and the note about an older run."""
        out = [self.note] if self.note else []
        if self.overridden:
            out.append(
                "override: " + "; ".join(f"{key}={_show(now)} (run: {_show(was)})" for key, now, was in self.overridden)
            )
        return out


def _show(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def load_tree(tree: dict[str, Any], overrides: list[str] | None = None) -> GapforgeConfig:
    """A config tree (e.g. a stored one) loaded through the one loader (env vars, `--set`, secrets from env vars)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(tree, fh)
        path = Path(fh.name)
    try:
        return load_config(path, overrides or [])
    finally:
        path.unlink(missing_ok=True)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def leaves(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), tree


def file_tree(path: str | None) -> dict[str, Any]:
    """The keys of `--config FILE` (load_config already checked that the file loads)."""
    if path is None:
        return {}
    loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return loaded if isinstance(loaded, dict) else {}


# config keys removed since a run may have stored them, with the value they had when unset: a run that stored them so
# loads; one that set them is refused in one line naming the replacement (config.REMOVED)
AT_DEFAULT = {"routing": {"vllm_base_url": None, "vllm_model": None, "timeout_s": 30.0}}


def stored_tree(record: dict[str, Any], invocation: GapforgeConfig) -> dict[str, Any] | None:
    """The run's stored config as a tree, with this invocation's `workspace` / `store` / `executor`; None when none is stored.
    A `rollouts collect` run's `--env` and `--policy` spec (stored beside the config) are applied to it."""
    stored = record.get("config")
    if not isinstance(stored, dict):
        return None
    mine = invocation.model_dump(mode="json")
    tree = {**stored, **{k: mine[k] for k in WHERE_KEYS}, "store": {**mine["store"], "url": invocation.store_url}}
    for section, removed in AT_DEFAULT.items():  # keys since removed that the run stored unset: nothing to refuse
        if isinstance(tree.get(section), dict):
            tree[section] = {k: v for k, v in tree[section].items() if not (k in removed and v == removed[k])}
    if isinstance(record.get("env"), str):  # `rollouts collect --env`: the env the run collected
        tree["rollouts"] = {**(tree.get("rollouts") or {}), "env": record["env"]}
    spec = record.get("policy_spec")
    if isinstance(spec, str) and spec:
        from gapforge.wiring import apply_policy_spec

        tree["policy"] = apply_policy_spec(_load_stored(tree), spec).model_dump(mode="json")
    return tree


def _load_stored(tree: dict[str, Any]) -> GapforgeConfig:
    try:
        return load_tree(tree)
    except ConfigError as e:
        raise ConfigError(
            f"the run's stored config does not load in this gapforge ({e}): use the gapforge version that made "
            "the run, or start a new run"
        ) from None


def _refuse_masked(cfg: GapforgeConfig, run_id: str) -> None:
    """A URL the run stored with its password masked (`cfg.dump()`) is usable only when this invocation gives it again
    (`--config`, an env var, `--set`): else the masked text would be sent as the password."""
    masked = [(k, v) for k, v in leaves(cfg.model_dump(mode="json")) if isinstance(v, str) and is_redacted(v)]
    if masked:
        key, value = masked[0]
        raise ConfigError(
            f"run {run_id} stored {key} with its password masked ({value}): give it again with --config FILE "
            f"or --set {key}=URL"
        )


def where_overrides(overrides: list[str] | None) -> list[str]:
    """The `--set` items that say where this invocation works (`workspace`, `store.*`, `executor.*`)."""
    return [o for o in overrides or [] if parse_override(o)[0].split(".")[0] in WHERE_KEYS]


def resolve(
    record: dict[str, Any],
    run_id: str,
    where: GapforgeConfig,
    config_path: str | None,
    overrides: list[str] | None = None,
) -> RunConfig:
    """The effective config of a command on `run_id` (module docstring). `overrides`: `--set` items and the command's flags
    as dotted settings; `where`: this invocation's config with only its `where_overrides` (it found the store)."""
    tree = stored_tree(record, where)
    if tree is None:
        note = (
            f"note: run {run_id} stores no config (an evaluation's child run, or made by hand): using this invocation's "
            "config and the defaults for everything else"
        )
        return RunConfig(load_config(config_path, overrides or []), note=note)
    run_cfg = _load_stored(tree)
    cfg = load_tree(_merge(tree, {k: v for k, v in file_tree(config_path).items() if k not in WHERE_KEYS}), overrides)
    _refuse_masked(cfg, run_id)
    was = dict(leaves(run_cfg.dump()))
    changed = [
        (k, v, was.get(k)) for k, v in leaves(cfg.dump()) if k.split(".")[0] not in WHERE_KEYS and was.get(k) != v
    ]
    return RunConfig(cfg, changed)
