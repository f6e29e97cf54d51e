"""Environment synthesis (DESIGN.md §1.3, §5): generator and validator agents and the repair loop.

Import the modules directly (`agents.synthesis.service`, ...): this package file stays empty
because gapforge/config.py imports `agents.synthesis.config` and must not pull the rest in.
"""
