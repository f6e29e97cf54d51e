"""Importing this file fails inside the user's code (a missing dependency)."""

import a_package_nobody_installed  # noqa: F401


class Env:
    pass
