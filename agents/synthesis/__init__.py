"""Environment synthesis (the synthesize and validate stages; docs/architecture.md): generator and validator agents and the repair loop.

Import the modules directly (`agents.synthesis.service`, ...): this package file stays empty
because gapforge/config.py imports `agents.synthesis.config` and must not pull the rest in.
"""
