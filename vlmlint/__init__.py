"""vlmlint: lint image+text datasets for vision-language models before training."""

__version__ = "0.1.0"

__all__ = ["__version__"]
