"""Errors at the serving boundary (bad input: a `gapforge.faults.InputFault`, exit 2)."""

from pathlib import Path

from gapforge.faults import InputFault


class ServingError(InputFault):
    """Bad serving input (missing model directory, unusable adapter, ...). The message says what to fix."""


def model_dir(path: str | Path, fix: str) -> Path:
    """`path` when it is a Hugging Face model directory, else a ServingError ending in `fix`."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ServingError(f"{path} is not a Hugging Face model directory (no config.json){fix}")
    return path


def adapter_dir(path: str | Path, prefix: str = "") -> Path:
    """`path` when it is a PEFT adapter directory, else a ServingError."""
    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise ServingError(f"{prefix}{path} is not a PEFT adapter directory (no adapter_config.json)")
    return path


def check_temperature(temperature: float) -> float:
    if temperature < 0:
        raise ServingError(f"temperature must be >= 0, got {temperature}")
    return temperature
