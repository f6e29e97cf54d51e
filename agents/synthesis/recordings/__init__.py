"""Recorded LLM answers for environment synthesis (data; see recorded.py). The modules in
shop/ are recorded generator answers: never imported, only read as text."""
