"""Recorded generator answers for the shop story (read as text, never imported)."""
