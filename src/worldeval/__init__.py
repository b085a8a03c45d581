"""worldeval: evaluation toolkit for generative world models (OPIS and WorldCast)."""

__version__ = "0.1.0"
