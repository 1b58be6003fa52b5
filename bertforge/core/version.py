__version__ = "0.1.0"  # the package's version, read by pyproject.toml
