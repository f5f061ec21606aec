"""Package discovery; everything else is in pyproject.toml.

A new task package (``encoder_tasks/tasks/<name>/``, with its ``__init__.py``) is found here, so
adding a task is one package plus one registry line. ``recipes/`` stays at the top of the
checkout (the Makefile and docs name ``recipes/<task>/default.yaml``) and ships inside the wheel
as ``encoder_tasks.recipes_data`` (``[tool.setuptools.package-dir]`` in pyproject.toml).
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["encoder_tasks", "encoder_tasks.*"]), "encoder_tasks.recipes_data"])
