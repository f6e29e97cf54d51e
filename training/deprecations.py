"""Third-party deprecation warnings nobody using gapforge can act on, silenced in one place.

transformers 5 renamed gradient checkpointing to activation checkpointing; TRL 1.16 and PEFT 0.21 still use the old
names (the property at every adapter load and GRPO generation; enable / disable around a generation when it is on, the
vLLM path), and each use warns. `quiet_library_deprecations()` silences exactly those messages in this process and,
through PYTHONWARNINGS, in the processes it starts (training, readiness and worker processes; not a Ray cluster
started on its own). The CLI calls it first thing; so does bench/effect.py, which trains and evaluates without it.
"""

from __future__ import annotations

LIBRARY_DEPRECATIONS = tuple(
    f"`{name}` is deprecated"
    for name in ("is_gradient_checkpointing", "gradient_checkpointing_enable", "gradient_checkpointing_disable")
)  # FutureWarnings


def quiet_library_deprecations() -> None:
    import os
    import re
    import warnings

    for message in LIBRARY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=re.escape(message), category=FutureWarning)
    have = [w for w in os.environ.get("PYTHONWARNINGS", "").split(",") if w]
    ours = [f"ignore:{message}:FutureWarning" for message in LIBRARY_DEPRECATIONS]  # -W syntax: matched at the start
    os.environ["PYTHONWARNINGS"] = ",".join(have + [w for w in ours if w not in have])
