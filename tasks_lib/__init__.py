"""PrototypeBench pipeline: curation and evaluation stages over one execution engine."""

__version__ = "0.1.0"
