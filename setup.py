# All settings live in pyproject.toml; this shim serves tools that still call setup.py.
from setuptools import setup

setup()
