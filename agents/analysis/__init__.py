"""Contrastive capability analysis (the discover, label and select stages; docs/architecture.md): compaction, discovery,
labeling x R, statistics with uncertainty, selection, the analysis/held-out split.

Kept import-light: gapforge/config.py imports `agents.analysis.config` on every command.
See agents/analysis/README.md for the modules and their service functions.
"""
