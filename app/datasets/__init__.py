"""Datasets: the in-memory type, built-ins from a data directory, uploads, and a demo set of fake
records (`synthetic_records`)."""
