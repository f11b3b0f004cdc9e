"""mt: neural machine translation you train on your own parallel data."""

__version__ = "0.4.0"  # the same as pyproject.toml's [project] version (tests/test_version.py checks)
