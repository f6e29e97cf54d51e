"""The read-only web viewer of a store (`gapforge ui`): FastAPI + Jinja2 + vendored htmx."""
