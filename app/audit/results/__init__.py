"""Typed results: one pydantic model per audit kind (`Result` in results/<kind>.py), beside the kind's
`Request` in kinds/<kind>.py and found through `app.audit.kinds.registry.result_model(kind)`.

Every field is described for users, so the OpenAPI document (and `/docs`) explains each number and an
OpenAPI generator can build a typed client. The models are the contract the service promises:

- The fields a kind always returns are required; those that only some runs have are optional (None).
- Each kind's `run` returns its `Result`, built where the kind assembles its numbers; `stored()` is what
  the runner stores and `app/audit/standalone.py` prints (the fields the kind set, in its order).
- `extra="allow"`: a field the science adds before its model declares it passes through unchanged (it
  is stored and returned, shown in the OpenAPI as an additional property) — results are never
  rejected for carrying more than the model knows. A declared field with the wrong type, or a
  required one missing, is a bug in the kind: its run raises and the audit fails rather than store it.
- `kind` (the discriminator of the union in the OpenAPI) is filled in from the audit when the kind's
  own dict lacks it.
"""
