"""Environment synthesis (the synthesize and validate stages). Import the modules directly: this file stays empty
because gapforge/config.py imports `agents.synthesis.config` and must not pull the rest in.
"""
