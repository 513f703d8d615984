"""fedbench: reproducible federated learning under structured non-IID data."""

__version__ = "0.1.0"
