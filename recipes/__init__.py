"""The ready-made recipes, shipped in the wheel as the package ``encoder_tasks.recipes_data``.

``pyproject.toml`` maps that package to this folder, so an installed encoder-tasks (editable or
from a wheel) finds the recipes with ``importlib.resources``; ``encoder-tasks recipes ls`` lists
them. The recipes themselves are the ``<task>/*.yaml`` files; ``accelerate/`` holds launch configs.
"""
