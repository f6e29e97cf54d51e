"""The shop, but its score carries a lock: an episode a worker process (local or a Ray actor) cannot send back."""

from __future__ import annotations

import threading
from typing import Any

from gapforge.envs.registry import make_env


class LockedScoreShop:
    """The shop env with a `threading.Lock` in every Score.info: pickling the episode fails."""

    def __init__(self) -> None:
        self.env = make_env("shop")
        self.name = self.env.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.env, attr)

    def score(self) -> Any:
        score = self.env.score()
        score.info["lock"] = threading.Lock()
        return score
