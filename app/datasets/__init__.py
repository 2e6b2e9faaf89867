"""Datasets: the in-memory type, built-ins from a data directory, uploads, and a synthetic demo set."""
