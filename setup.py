"""Maps lib/ to the import package ``hipress``; everything else lives in pyproject.toml."""

from setuptools import find_packages, setup

packages = ["hipress"] + [f"hipress.{p}" for p in find_packages("lib")]
packages += ["hipress_cli"] + [f"hipress_cli.{p}" for p in find_packages("hipress_cli")]
setup(packages=packages)
