"""iclaudit's Python client: `from iclaudit.client import IclauditClient` (see iclaudit/client.py)."""
