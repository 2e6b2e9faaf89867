"""Audit kinds: each module defines a pydantic `Request` (with `kind: Literal[...]`) and `run(request, ctx) -> dict`.

Adding a kind is one new module and one line in `registry.KINDS`.
"""
