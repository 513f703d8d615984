"""Datasets (``sources``), non-IID partitioners (``partitioners``) and their on-disk form (``partition_file``)."""
