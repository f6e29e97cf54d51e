"""Contrastive capability analysis (the discover, label and select stages; agents/analysis/README.md). Kept
import-light: gapforge/config.py imports `agents.analysis.config` on every command.
"""
