"""What `gapforge run` checks before it creates anything: every check that needs no episode.

A run that cannot finish should say so in the first second, not after hours of rollouts. In order:
the config can complete a run (`check_run_config`), the target env loads (its class imports, its tools and tasks
pass the protocol check: `make_target_env_factory` builds one and closes it) and has the tasks and families the config
names (`check_names`: rollouts.tasks, evaluation.focus_family, evaluation.family_trials), the policy's weights are there and a
served policy answers, and every LLM role the run will ask can answer for this env: a key and an answering endpoint
for `llm.kind: openai`, a recording for this env (or a file of recorded answers naming the analyst's prompts) for
`llm.kind: scripted`, and the generator's recordings. Each refusal is one line naming the setting to change
(ConfigError, exit 2); nothing is stored before all of them pass.
"""

from __future__ import annotations

from pathlib import Path

from gapforge.agents.config import DEFAULT_KEY_ENV, EndpointConfig
from gapforge.config import GapforgeConfig, check_run_config
from gapforge.envs.protocol import TargetEnvironment
from gapforge.errors import ConfigError, GapforgeError
from gapforge.training.tracking import check_trackers

ANALYST_PROMPTS = ("analyst_discover", "analyst_label")  # the prompt names the analyst asks (prompts/)
RECORDINGS_DOC = "docs/recordings.md"


def check_before_run(cfg: GapforgeConfig) -> None:
    """Refuse (one line, exit 2; the env's own code failing to load: its exit 4) a run that could not finish."""
    check_run_config(cfg)
    check_trackers(cfg.training.report_to)  # a tracker not installed: before any work, not as a failed adapter
    check_target(cfg)
    check_policy(cfg)
    check_llm_roles(cfg)


def check_target(cfg: GapforgeConfig) -> None:
    """The target env builds (a user's class is checked against the protocol there) and closes."""
    from gapforge.wiring import make_target_env_factory

    probe, _ = make_target_env_factory(cfg, cfg.rollouts.env)
    try:
        check_names(cfg, probe)
        seen = set(cfg.rollouts.tasks or probe.task_ids())
    finally:
        probe.close()
    if cfg.evaluation.unseen_env:
        check_unseen(cfg, seen)


def check_unseen(cfg: GapforgeConfig, seen: set[str]) -> None:
    """evaluation.unseen_env builds, has tasks, and shares none with the target's (`seen`): the second held-out split
    is on records no analysis-split task touched (for the shop: other instances)."""
    from gapforge.wiring import make_target_env_factory

    unseen = cfg.evaluation.unseen_env or ""
    probe, _ = make_target_env_factory(cfg, unseen)
    try:
        ids = probe.task_ids()
        families = {probe.task_family(t) for t in ids}
    finally:
        probe.close()
    shared = sorted(seen & set(ids))
    if not ids or shared:
        why = (
            "has no task" if not ids else f"shares {len(shared)} task id(s) with rollouts.env ({', '.join(shared[:3])})"
        )
        raise ConfigError(
            f"evaluation.unseen_env '{unseen}' {why}: name a target whose tasks the run never plays, e.g. other shop "
            "instances (shop?instances=61-70 beside rollouts.env=shop?instances=0,51-60)"
        )
    for key, family in _named_families(cfg):  # it is played with the held-out split's settings
        if family not in families:
            raise ConfigError(
                f"{key}: evaluation.unseen_env '{unseen}' has no task in family {family!r} (its families: "
                f"{', '.join(sorted(families))}): name a target with the same families"
            )


def check_names(cfg: GapforgeConfig, target: TargetEnvironment) -> None:
    """The task ids and families the config names exist in the target: a typo is refused now, not after training."""
    env, ids = cfg.rollouts.env, target.task_ids()
    unknown = [t for t in cfg.rollouts.tasks or [] if t not in set(ids)]
    if unknown:
        raise ConfigError(
            f"rollouts.tasks: unknown task id(s) {', '.join(unknown)} in {env}: list them with `gapforge rollouts tasks {env}`"
        )
    families = {target.task_family(t) for t in cfg.rollouts.tasks or ids}
    for key, family in _named_families(cfg):
        if family not in families:
            raise ConfigError(
                f"{key}: no task of {env} is in family {family!r}: use one of {', '.join(sorted(families)) or 'none'}"
            )


def _named_families(cfg: GapforgeConfig) -> list[tuple[str, str]]:
    """(config key, family) of every family the evaluation settings name."""
    ev = cfg.evaluation
    named = [("evaluation.family_trials", f) for f in ev.family_trials]
    return named + ([("evaluation.focus_family", ev.focus_family)] if ev.focus_family is not None else [])


def check_policy(cfg: GapforgeConfig) -> None:
    """The base model's weights are on this machine (training and routing load them here); a served policy answers."""
    from gapforge.wiring import check_endpoint_reachable

    pol = cfg.policy
    if pol.local_path:
        folder = Path(pol.local_path).expanduser()
        if not folder.is_dir():
            raise ConfigError(
                f"policy.local_path '{pol.local_path}' is not a directory: point it at a Hugging Face model folder"
            )
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"policy.local_path '{pol.local_path}' holds no config.json: point it at a Hugging Face model folder "
                "(its weights, config and tokenizer)"
            )
    if pol.adapter_path and not Path(pol.adapter_path).expanduser().is_dir():
        raise ConfigError(
            f"policy.adapter_path '{pol.adapter_path}' is not a directory: point it at a PEFT adapter folder or unset it"
        )
    if pol.kind == "endpoint":
        _key(pol.endpoint, "policy.endpoint")
        check_endpoint_reachable(pol.endpoint.base_url)


def check_llm_roles(cfg: GapforgeConfig) -> None:
    """The analyst, the generator and reviewer, and an LLM user simulator can each answer for this env."""
    if cfg.llm.kind == "openai":
        _endpoint(cfg.llm.endpoint, "llm.endpoint", "the analyst, the generator and the reviewer")
    check_recorded_roles(cfg)
    if cfg.rollouts.user == "llm" and cfg.rollouts.user_endpoint == "llm" and cfg.llm.kind != "openai":
        _endpoint(cfg.llm.endpoint, "llm.endpoint", "the LLM user simulator (rollouts.user=llm)")


def check_recorded_roles(cfg: GapforgeConfig) -> None:
    """llm.kind=scripted: the analyst's, generator's and reviewer's recorded answers exist for this env (no network)."""
    if cfg.llm.kind != "openai":
        _recorded_analyst(cfg, cfg.rollouts.env)
        _recorded_synthesis(cfg, cfg.rollouts.env)


def _recorded_analyst(cfg: GapforgeConfig, env: str) -> None:
    if cfg.llm.scripted_path:
        from gapforge.agents.scripted import ScriptedChatModel

        try:
            model = ScriptedChatModel.from_file(cfg.llm.scripted_path)
        except GapforgeError as e:
            raise ConfigError(f"llm.scripted_path: {e}") from None
        missing = [p for p in ANALYST_PROMPTS if p not in model.answers and model.default_prompt is None]
        if missing:
            raise ConfigError(
                f"llm.scripted_path '{cfg.llm.scripted_path}' has no answers for {', '.join(missing)}: record them "
                f"(the format: {RECORDINGS_DOC}) or set llm.kind=openai and llm.endpoint"
            )
        return
    from gapforge.agents.analysis.recorded import has_recording

    if not has_recording(env):
        raise ConfigError(
            f"llm.kind=scripted answers the analyst from recordings, and there is none for env '{env}': set llm.kind=openai "
            f"with llm.endpoint (an OpenAI-compatible server), or llm.scripted_path=FILE of recorded answers ({RECORDINGS_DOC})"
        )


def _recorded_synthesis(cfg: GapforgeConfig, env: str) -> None:
    from gapforge.agents.synthesis.recorded import SHOP_RECORDINGS
    from gapforge.envs.registry import is_shop

    if cfg.synthesis.recordings is None:
        if not is_shop(env):
            raise ConfigError(
                f"llm.kind=scripted answers the generator from synthesis.recordings, and the built-in ones answer for the "
                f"shop env only, not '{env}': set synthesis.recordings=FILE ({RECORDINGS_DOC}) or llm.kind=openai with llm.endpoint"
            )
        path = SHOP_RECORDINGS
    else:
        path = Path(cfg.synthesis.recordings).expanduser()
    if not Path(path).is_file():
        raise ConfigError(
            f"synthesis.recordings '{path}' not found: point it at a YAML file of recorded generator answers ({RECORDINGS_DOC})"
        )


def _key(ep: EndpointConfig, where: str) -> None:
    """The endpoint's key: refused where it must not go; missing where the endpoint needs one (OpenAI's own API)."""
    try:
        key = ep.api_key
    except GapforgeError as e:  # a key that would travel in clear text: its own one line
        raise ConfigError(f"{where}: {e}") from None
    if key is None and ep.is_openai():
        raise ConfigError(
            f"{where} is OpenAI's API and no key is set: export {ep.key_env} (or name another variable in "
            f"{where}.api_key_env), or point {where}.base_url at your OpenAI-compatible server"
        )
    if key is None and ep.api_key_env:
        raise ConfigError(
            f"{where}.api_key_env names {ep.api_key_env}, which is not set: export it, or unset {where}.api_key_env "
            f"(a local server needs no key; {DEFAULT_KEY_ENV} goes only to OpenAI's API)"
        )


def _endpoint(ep: EndpointConfig, where: str, who: str) -> None:
    """A key where one is needed, and a server that answers at base_url (OpenAI's own API is not asked: no request
    is spent before the run)."""
    from gapforge.wiring import endpoint_failure

    _key(ep, where)
    if ep.base_url is None:
        return
    if (failure := endpoint_failure(ep.base_url)) is not None:
        raise ConfigError(
            f"{where}.base_url {ep.base_url} does not answer ({failure}), and {who} talk to it: "
            f"start the server or fix {where}.base_url"
        )
