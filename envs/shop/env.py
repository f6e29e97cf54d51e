"""ShopEnv: the built-in target environment behind envs.protocol.TargetEnvironment.

Reward like τ²-bench: 1.0 iff the final DB hash equals the hash after replaying
the task's gold actions on a fresh DB, times the communicate check (every
required string appears in the agent's text). success = reward == 1.0.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import USER_TOKENS, Message, Score, StepResult, TaskRef
from gapforge.envs.shop.catalog import build_tasks
from gapforge.envs.shop.data import ShopDB, build_db
from gapforge.envs.shop.tasks import ShopTask
from gapforge.envs.shop.tools import READ_TOOLS, SCHEMAS, TRANSFER_TOOL, WRITE_TOOLS, ShopTools, ToolError
from gapforge.envs.shop.user import LLMUser, ScriptedUser, normalize


@dataclass(frozen=True)
class _Pristine:
    """What every ShopEnv shares, built once per process: the DB never changes, so
    neither do the tasks nor the gold state hashes (rollouts make one env per
    episode; rebuilding these each time was most of an episode's CPU)."""

    db: ShopDB  # read-only: read tools run on it, an episode copies it at its first write tool call
    dump: dict[str, Any]
    db_hash: str
    tasks: dict[str, ShopTask]
    policy: str
    tools_json: str
    gold_hash: dict[str, str]  # task id -> state hash after its gold actions, filled lazily
    substituted: tuple[str, ...]  # templates another customer or product served (catalog.build_tasks)

    def fresh_db(self) -> ShopDB:
        # validating from the dump builds new objects and is ~4x faster than a deep model_copy
        return ShopDB.model_validate(self.dump)


@functools.lru_cache(maxsize=1024)  # one per shop instance in use, about 1 MB each
def _pristine(instance: int = 0) -> _Pristine:
    db = build_db(instance)
    tasks, substituted = build_tasks(db)
    return _Pristine(
        db=db,
        dump=db.model_dump(),
        db_hash=db.state_hash(),
        tasks=tasks,
        substituted=tuple(substituted),
        policy=resources.files("gapforge.envs.shop").joinpath("policy.md").read_text(encoding="utf-8"),
        tools_json=json.dumps(SCHEMAS),
        gold_hash={},
    )


MAX_INSTANCES = 1000  # a shop of many instances holds every one in memory (_pristine)


def parse_instances(text: str) -> tuple[int, ...]:
    """`0-120`, `0,51-120`, `7` -> the instance numbers, ascending, each once (EnvError on anything else)."""
    out: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi if dash else lo)
        except ValueError:
            first, last = -1, -1
        if first < 0 or last < first:
            raise EnvError(f"bad shop instances '{text}': use numbers and ranges >= 0, e.g. shop?instances=0,51-120")
        if len(out) + last - first + 1 > MAX_INSTANCES:
            raise EnvError(
                f"shop instances '{text}' name more than {MAX_INSTANCES} (about 1 MB each): list fewer, e.g. "
                "shop?instances=0,51-120"
            )
        out.update(range(first, last + 1))
    return tuple(sorted(out))


def instance_task_id(instance: int, task_id: str) -> str:
    """A task's id in a shop of many instances: instance 0 keeps its own id (shop-lookup-001), instance k's tasks
    are named after it (shop-i57-lookup-001)."""
    return task_id if instance == 0 else task_id.replace("shop-", f"shop-i{instance}-", 1)


class ShopEnv:
    """The shop. user="scripted" (deterministic, offline) or "llm" (pass `user_model`, a LangChain chat model).
    `instance` k >= 1 is another shop of the same shape (`build_db(instance=k)`: other customers and ids,
    the same task templates); it exists to teach on data disjoint from THE shop (instance 0).
    `instances` (the spec `shop?instances=0,51-120`) makes one env of many shops: the tasks of every listed
    instance, in the same four families and proportions, each played on its own instance's records; task ids name
    their instance (`instance_task_id`). An instance whose templates no customer can serve (4 of 0-120) is left
    out; `built` lists the instances kept."""

    name = "shop"

    def __init__(
        self, *, user: str = "scripted", user_model: Any = None, instance: int = 0, instances: Any = None
    ) -> None:
        if user not in ("scripted", "llm"):
            raise EnvError(f"unknown user '{user}' for env shop: use 'scripted' or 'llm'")
        if user == "llm" and user_model is None:
            raise EnvError("env shop with user='llm' needs a user model: configure the user simulator endpoint")
        if instances is not None and instance != 0:
            raise EnvError(f"shop instance={instance} with instances=...: name one, e.g. instances={instance}")
        self.user_kind = user
        self.user_model = user_model
        self.instance = instance
        # Calls take ~1 ms of CPU with the scripted user: the policy loop runs them on the event
        # loop (a worker-thread hop costs more than that under load). The LLM user blocks on HTTP.
        self.inline = user == "scripted"
        try:
            self._shared = _pristine(instance)
        except (AssertionError, IndexError, ValueError) as e:
            raise EnvError(f"shop instance {instance} cannot be built ({e}): use another instance number") from None
        if self._shared.substituted and instances is None:  # alone, an instance serves every template as written
            raise EnvError(
                f"shop instance {instance} cannot be built as written ({self._shared.substituted[0]}): use another "
                "instance number, or shop?instances=... (which lets another customer serve a template)"
            )
        self._tasks = self._shared.tasks
        self._instance_of: dict[str, int] = {}  # task id -> its instance (a shop of many instances only)
        self.built: tuple[int, ...] = (instance,)
        if instances is not None:
            self._many(tuple(instances))
        self._policy = self._shared.policy
        self._task: ShopTask | None = None
        self._db: ShopDB | None = None

    def _many(self, instances: tuple[int, ...]) -> None:
        tasks: dict[str, ShopTask] = {}
        built = []
        for k in instances:
            try:
                shared = _pristine(k)
            except (AssertionError, IndexError, ValueError):
                continue  # no customer can serve one of its templates
            built.append(k)
            for tid, t in shared.tasks.items():
                name = instance_task_id(k, tid)
                tasks[name] = t if k == 0 else t.model_copy(update={"task_id": name})
                self._instance_of[name] = k
        if not built:
            raise EnvError(f"none of the shop instances {list(instances)} can be built: list others")
        self._tasks, self.built = tasks, tuple(built)

    def task_ids(self) -> list[str]:
        return list(self._tasks)

    def task_family(self, task_id: str) -> str:
        return self.task(task_id).family

    def tools(self) -> list[dict[str, Any]]:
        return json.loads(self._shared.tools_json)  # a fresh copy, faster than deepcopy

    def reset(self, task: TaskRef) -> list[Message]:
        t = self.task(str(task))
        if self._instance_of:
            self._shared = _pristine(self._instance_of[t.task_id])
        self._task = t
        self._db = self._shared.db  # copy-on-write: most episodes never write
        self._db_owned = False
        self._tools = ShopTools(self._db)
        self._user: ScriptedUser | LLMUser = self._make_user(t)
        self._said: list[str] = []
        self._writes = 0
        self._done = False
        self._termination: str | None = None
        return [Message.system(self._policy), Message.user(self._user.opening())]

    def step(self, message: Message) -> StepResult:
        if self._task is None:
            raise EnvError("env shop: call reset(task) before step()")
        if message.role != "assistant":
            raise EnvError(f"env shop: step() takes an assistant message, got role '{message.role}'")
        if self._done:
            return StepResult(done=True, info={"termination": self._termination})
        if message.content:
            self._said.append(message.content)
        if message.tool_calls:
            out = [self._run_tool(tc.id, tc.name, tc.arguments) for tc in message.tool_calls]
        else:
            text, stop = self._user.reply(message.content or "", "\n".join(self._said), self._writes)
            if stop:
                self._done, self._termination = True, "user_stop"
            out = [Message.user(text)]
        return StepResult(messages=out, done=self._done, info={"termination": self._termination} if self._done else {})

    def score(self) -> Score:
        if self._task is None or self._db is None:
            raise EnvError("env shop: call reset(task) before score()")
        t = self._task
        state = self._db.state_hash() if self._db_owned else self._shared.db_hash
        db_ok = float(state == self._gold_state_hash(t))
        heard = normalize("\n".join(self._said))
        missing = [s for s in t.required_info if normalize(s) not in heard]
        comm_ok = float(not missing)
        reward = db_ok * comm_ok
        evaluator = "shop: db hash vs gold replay x communicate"
        info = {"evaluator": evaluator, "missing_info": missing, "family": t.family, "user": self.user_kind}
        if self.user_kind == "llm":
            info["user_prompt"] = getattr(self._user, "prompt_id", None)
            info[USER_TOKENS] = list(getattr(self._user, "tokens", (0, 0)))
        return Score(reward=reward, success=reward == 1.0, components={"db": db_ok, "communicate": comm_ok}, info=info)

    def close(self) -> None:
        self._db = None

    def task(self, task_id: str) -> ShopTask:
        """The full task (gold actions, required info, user script)."""
        if task_id not in self._tasks:
            raise EnvError(f"unknown task '{task_id}' in env shop: see `gapforge rollouts tasks shop`")
        return self._tasks[task_id]

    def _make_user(self, t: ShopTask) -> ScriptedUser | LLMUser:
        if self.user_kind == "llm":
            return LLMUser(self.user_model, t)
        return ScriptedUser(t.user, t.required_info)

    def _run_tool(self, call_id: str, name: str, args: dict[str, Any]) -> Message:
        if name in WRITE_TOOLS and not self._db_owned:
            self._db = self._shared.fresh_db()
            self._tools.db = self._db  # keeps the verified customer
            self._db_owned = True
        try:
            result = self._tools.call(name, args)
        except ToolError as err:
            return Message.tool(call_id, f"Error: {err}", name=name)
        if name in WRITE_TOOLS:
            self._writes += 1
        if name == TRANSFER_TOOL:
            self._done, self._termination = True, "transfer"
        return Message.tool(call_id, result, name=name)

    def _gold_state_hash(self, t: ShopTask) -> str:
        cache = self._shared.gold_hash
        if t.task_id not in cache and all(a.name in READ_TOOLS for a in t.gold_actions):
            # read tools never change the DB (copy-on-write relies on it too): no replay
            cache[t.task_id] = self._shared.db_hash
        if t.task_id not in cache:
            db = self._shared.fresh_db()
            tools = ShopTools(db)
            for action in t.gold_actions:
                tools.call(action.name, action.arguments)  # a ToolError here is a bug in the task, not the agent
            cache[t.task_id] = db.state_hash()
        return cache[t.task_id]
