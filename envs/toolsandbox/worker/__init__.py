"""Files run by ToolSandbox's own venv (`python ts_server.py`); a package only so they ship with gapforge. Never import them here."""
