"""aotkit's C part (aotkit/_speedups.c); everything else about the package is in pyproject.toml.

The extension is optional: where no C compiler (or no Python headers) is found, the install
goes on without it and aotkit runs on its Python stand-ins (aotkit/_native.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("aotkit._speedups", ["aotkit/_speedups.c"], optional=True)])
