"""What the service shows of the records it is trusted with (redact.py)."""
