"""zerosim's version, in one place: the package hands it on (`zerosim.__version__`), the
commands print it (`--version`) and the report page stamps it; pyproject.toml's matches it
(tests/test_packaging.py)."""

__version__ = "0.1.0"
