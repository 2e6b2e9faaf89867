"""The baseline of `bench/run.py api`: a bare FastAPI app with one JSON endpoint, served by uvicorn exactly as
`iclaudit serve` serves the service (app.api.connections.uvicorn_options: the same h11 protocol with the
header deadline, keep-alive, header size limit, and the same root logging with its access lines).

    python -m bench.bare_app --port 8001

`GET /v1/audits/{audit_id}` answers a small JSON object (no authentication, no database, no middleware), so
a load generator can offer it the very URLs it offers the service.
"""

from __future__ import annotations

import argparse

from fastapi import FastAPI

app = FastAPI()


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.get("/v1/audits/{audit_id}")
async def hello(audit_id: str) -> dict[str, str]:
    return {"id": audit_id, "hello": "world"}


def main() -> None:
    import uvicorn

    from app.api.connections import uvicorn_options
    from app.config import get_settings
    from app.observability import configure_logging

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1, help="processes, as `iclaudit serve --workers`")
    args = parser.parse_args()
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_format)  # as `iclaudit serve` (app.cli.server)
    uvicorn.run(
        "bench.bare_app:app",
        host="127.0.0.1",
        port=args.port,
        workers=args.workers,
        **uvicorn_options(settings),
    )


if __name__ == "__main__":
    main()
