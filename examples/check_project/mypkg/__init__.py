"""A project with an optimizer of its own (examples/check_project)."""
