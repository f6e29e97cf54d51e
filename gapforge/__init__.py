"""gapforge: capability-targeted agentic training (TRACE) as a product.

One namespace: the repository's top-level folders (`agents/`, `envs/`, `graph/`, ...) are the packages
`gapforge.agents`, `gapforge.envs`, `gapforge.graph`, ... pyproject.toml [tool.setuptools.package-dir] maps each folder
under `gapforge/`: a wheel holds them there, and the editable install (`make install`) resolves them to the checkout's
folders. A checkout without an install does not resolve them: install it first.
"""
