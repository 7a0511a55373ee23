"""The version, in a leaf module: any layer may read it without importing the package's API."""

__version__ = "0.1.0"
