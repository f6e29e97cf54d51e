"""The errors a user can fix, by boundary. The CLI prints any of `USER_ERRORS` as one
line with exit code 2 and no traceback; stage services raise them, never print."""

from __future__ import annotations

from agents.errors import IncompleteStage, ModelError
from envs.errors import EnvError
from executor.errors import ExecutorUnavailable
from graph.checkpoint import CheckpointDiskFull
from prompts import PromptError
from sandbox.errors import SandboxError
from serving.errors import ServingError
from store.errors import DiskFull, StoreError


class ConfigError(Exception):
    """A bad config file, key or value. The message says what to fix."""


class UsageError(Exception):
    """Bad command-line or stage input (a path, an id, a count); the message says what to fix."""


# PromptError is a packaging bug, not user input: it is deliberately not listed.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError, UsageError, EnvError, StoreError, SandboxError, ModelError, ServingError, ExecutorUnavailable,
)

# Infrastructure failures that outlived every retry, or a full disk: one line, exit 3 (resumable), never exit 0.
# (DiskFull is a StoreError: the CLI checks this tuple before USER_ERRORS.)
INCOMPLETE_ERRORS: tuple[type[BaseException], ...] = (IncompleteStage, DiskFull, CheckpointDiskFull)
INCOMPLETE_EXIT_CODE = 3

__all__ = ["INCOMPLETE_ERRORS", "INCOMPLETE_EXIT_CODE", "IncompleteStage", "USER_ERRORS", "ConfigError", "EnvError", "ModelError", "PromptError", "SandboxError", "ServingError", "StoreError", "UsageError"]
