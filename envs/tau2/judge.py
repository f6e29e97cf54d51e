"""τ²'s NL-assertion judge pointed at a configured OpenAI-compatible endpoint, and the no-judge fallback.

tau2 reads its judge model and arguments from module globals of
`tau2.evaluator.evaluator_nl_assertions` (`DEFAULT_LLM_NL_ASSERTIONS`,
`DEFAULT_LLM_NL_ASSERTIONS_ARGS`, copied from tau2.config at import) and has no
parameter for them. `configured_judge(endpoint)` sets both for the duration of
one evaluation, under a process-wide lock (two episodes scoring at once with
different judges cannot see each other's endpoint), and restores them after.
The judging itself — prompt, parsing, the verdict — stays tau2's.

Without a judge, a task whose reward basis contains NL_ASSERTION is evaluated by
tau2's `ALL` evaluation on the task with NL_ASSERTION removed from its basis:
every other component (DB / env assertions, actions, communicate) is still
computed by tau2, and the score records what was dropped.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gapforge.envs.tau2.domain import load_tau2
from gapforge.envs.tau2.users import UserEndpoint

_JUDGE_MODULE = "tau2.evaluator.evaluator_nl_assertions"
_LOCK = threading.Lock()


@contextmanager
def configured_judge(endpoint: UserEndpoint | None) -> Iterator[None]:
    """tau2's NL-assertion judge talks to `endpoint` inside the block (no-op for None)."""
    if endpoint is None:
        yield
        return
    module = importlib.import_module(_JUDGE_MODULE)
    with _LOCK:
        saved = module.DEFAULT_LLM_NL_ASSERTIONS, module.DEFAULT_LLM_NL_ASSERTIONS_ARGS
        module.DEFAULT_LLM_NL_ASSERTIONS = endpoint.litellm_model()
        module.DEFAULT_LLM_NL_ASSERTIONS_ARGS = endpoint.litellm_args()
        try:
            yield
        finally:
            module.DEFAULT_LLM_NL_ASSERTIONS, module.DEFAULT_LLM_NL_ASSERTIONS_ARGS = saved


def needs_nl_judge(task: Any) -> bool:
    criteria = task.evaluation_criteria
    return criteria is not None and load_tau2().RewardType.NL_ASSERTION in criteria.reward_basis


def evaluation_plan(task: Any, judge: UserEndpoint | None) -> tuple[Any, Any, list[str]]:
    """(tau2 EvaluationType, the task to evaluate, reward components dropped) for `task`.

    ALL normally; ALL_WITH_NL_ASSERTIONS when the task needs a judge and one is
    configured; without a judge, ALL on a copy of the task whose reward basis
    lacks NL_ASSERTION, with ["nl_assertion"] reported as dropped.
    """
    t = load_tau2()
    if not needs_nl_judge(task):
        return t.EvaluationType.ALL, task, []
    if judge is not None:
        return t.EvaluationType.ALL_WITH_NL_ASSERTIONS, task, []
    reduced = task.model_copy(deep=True)
    reduced.evaluation_criteria.reward_basis = [
        b for b in task.evaluation_criteria.reward_basis if b != t.RewardType.NL_ASSERTION
    ]
    return t.EvaluationType.ALL, reduced, ["nl_assertion"]
