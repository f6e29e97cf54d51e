"""AnalysisError: the analysis stage cannot run on this input (no episodes, no failures,
no recorded analyst for an env, a bad tokenizer setting). The message says what to fix.

Model failures keep their own types (agents.errors.ModelError and subclasses): an
analyst whose output stays invalid after the re-ask is the model's fault, not the input's.
AnalysisError is bad input (a `gapforge.faults.InputFault`): one line, exit 2.
"""

from gapforge.faults import InputFault


class AnalysisError(InputFault):
    """The analysis stage cannot run as asked; the one-line message says what to fix."""
