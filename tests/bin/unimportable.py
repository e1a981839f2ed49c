"""A module that is installed but fails to import: validate finds it, its zygote cannot
start, and the processes that wanted it start cold."""

raise ImportError("this module fails to import on purpose")
