"""A sibling module of desk_env.py: the tasks (desk_env imports it by its plain name)."""

TASKS = {
    "desk-reset-001": ("password_reset", "I forgot my password for account u-17.", "u-17"),
    "desk-reset-002": ("password_reset", "Please reset the password of u-42.", "u-42"),
    "desk-unlock-001": ("unlock", "Account u-17 is locked, can you unlock it?", "u-17"),
}
DEV = ("desk-reset-001",)
