"""The CLI silences the one third-party deprecation every GRPO step and adapter load printed, in its own process
and in the processes it starts, and nothing else."""

import os
import subprocess
import sys
import warnings

from gapforge.training.deprecations import quiet_library_deprecations

OLD = "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use `is_activation_checkpointing` instead."
TOGGLE = "`gradient_checkpointing_disable` is deprecated and will be removed in v6. Use `activation_checkpointing_disable` instead."
CHILD = (
    "import warnings; warnings.warn("
    + repr(OLD)
    + ", FutureWarning); warnings.warn("
    + repr(TOGGLE)
    + ", FutureWarning); "
    "warnings.warn('something else is deprecated', FutureWarning)"
)


def test_the_checkpointing_deprecation_is_silenced_here_and_in_children(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "default::DeprecationWarning")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_library_deprecations()
        quiet_library_deprecations()  # twice: the child's setting is not repeated
        warnings.warn(OLD, FutureWarning)
        warnings.warn(TOGGLE, FutureWarning)
        warnings.warn(OLD, DeprecationWarning)  # another category with the same words still shows
        warnings.warn("something else is deprecated", FutureWarning)
    assert [str(w.message) for w in seen] == [OLD, "something else is deprecated"]
    assert os.environ["PYTHONWARNINGS"].split(",")[0] == "default::DeprecationWarning"  # the user's own setting kept
    assert os.environ["PYTHONWARNINGS"].count("is_gradient_checkpointing") == 1
    child = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=dict(os.environ), check=True
    )
    assert "checkpointing" not in child.stderr and "something else is deprecated" in child.stderr
