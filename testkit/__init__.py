"""The test kit: real servers, served apps and set-ups shared by tests/, bench/ and docs/results/.

Installed by the project's editable install (pyproject's package list), so tests, benchmarks and result
scripts import it as `testkit.<module>` without editing `sys.path`. Nothing here mocks: each helper starts
a real process or server (PostgreSQL, Redis, uvicorn, `iclaudit serve`, loopback HTTP endpoints).
"""
