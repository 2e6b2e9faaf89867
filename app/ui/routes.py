"""Routes of the web interface: `/` → `/ui`; the pages (one HTML shell each, filled in by its module in
static/js); `/ui/examples.json` (the request examples the Submit page offers); `/docs` and `/redoc` on
the vendored Swagger UI and ReDoc; the static files.

The shells carry no data and no inline script (a strict Content-Security-Policy allows them): every
number comes from the /v1 API, called by the browser with the key kept in sessionStorage, so tenant
isolation is the API's own.
"""

from __future__ import annotations

import html
import json
from functools import cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"  # a source checkout's examples/

router = APIRouter(include_in_schema=False)

PAGES = {
    "audits": ("Audits", "audits.js"),
    "audit": ("Audit", "audit.js"),
    "submit": ("Submit an audit", "submit.js"),
    "sweeps": ("Sweeps", "sweeps.js"),
    "compare": ("Compare audits", "compare.js"),
    "datasets": ("Datasets", "datasets.js"),
}


def _asset(path: str) -> str:
    """URL of a static file with its modification time, so a new release is never served from cache."""
    stamp = int((STATIC / path).stat().st_mtime)
    return f"/ui/static/{path}?v={stamp}"


def page(name: str, **data: str) -> HTMLResponse:
    """The shell of page `name`: header, navigation, the login dialog, an empty <main> for its module."""
    title, script = PAGES[name]
    attrs = " ".join(f'data-{k}="{html.escape(v)}"' for k, v in data.items())
    nav = "".join(
        f'<li><a href="{href}" data-nav="{key}">{label}</a></li>'
        for key, href, label in (
            ("audits", "/ui", "Audits"),
            ("submit", "/ui/submit", "Submit"),
            ("sweeps", "/ui/sweeps", "Sweeps"),
            ("datasets", "/ui/datasets", "Datasets"),
            ("docs", "/docs", "API docs"),
        )
    )
    body = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} · iclaudit</title>
<link rel="stylesheet" href="{_asset("vendor/uplot/uPlot.min.css")}">
<link rel="stylesheet" href="{_asset("css/app.css")}">
<link rel="icon" href="data:,">
<script src="{_asset("vendor/uplot/uPlot.iife.min.js")}" defer></script>
<script type="module" src="{_asset("js/" + script)}"></script>
</head>
<body data-page="{name}" {attrs}>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <a class="brand" href="/ui">iclaudit</a>
  <nav aria-label="Main"><ul>{nav}</ul></nav>
  <span class="who" id="who" aria-live="polite"></span>
</header>
<main id="main" tabindex="-1"><p class="muted" id="loading">Loading…</p></main>
<dialog id="login" aria-labelledby="login-title">
  <form method="dialog" id="login-form">
    <h2 id="login-title">API key</h2>
    <p>This server requires a key (<code>iclaudit keys create --tenant NAME</code> makes one). It is kept
    for this browser tab only (sessionStorage) and sent as <code>Authorization: Bearer</code>.</p>
    <label for="login-key">API key</label>
    <input id="login-key" name="key" type="password" autocomplete="off" required spellcheck="false">
    <p class="error" id="login-error" role="alert"></p>
    <div class="buttons"><button type="submit" class="primary">Use this key</button></div>
  </form>
</dialog>
</body>
</html>
"""
    return HTMLResponse(body)


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/ui", status_code=307)


@router.get("/ui")
def audits_page() -> HTMLResponse:
    return page("audits")


@router.get("/ui/audits/{audit_id}")
def audit_page(audit_id: str) -> HTMLResponse:
    return page("audit", audit=audit_id)


@router.get("/ui/submit")
def submit_page() -> HTMLResponse:
    return page("submit")


@router.get("/ui/compare")
def compare_page() -> HTMLResponse:
    """2–4 audits side by side (`?ids=a,b,…`): requests diffed, results in columns, ROC curves overlaid."""
    return page("compare")


@router.get("/ui/datasets")
def datasets_page() -> HTMLResponse:
    """Upload a dataset (a progress bar for big files) and list the uploaded and built-in ones."""
    return page("datasets")


@router.get("/ui/sweeps")
def sweeps_page() -> HTMLResponse:
    return page("sweeps")


@cache
def examples() -> list[dict[str, Any]]:
    """Each kind's EXAMPLE, then the example files of a source checkout (examples/*.json)."""
    from app.schemas.audits import request_examples

    out = [
        {"name": f"{kind} (the kind's example)", "body": ex["value"]}
        for kind, ex in request_examples().items()
    ]
    if EXAMPLES_DIR.is_dir():
        for path in sorted(EXAMPLES_DIR.glob("*.json")):
            try:
                out.append({"name": path.name, "body": json.loads(path.read_text(encoding="utf-8"))})
            except (OSError, ValueError):
                continue
    return out


@router.get("/ui/examples.json")
def examples_json() -> JSONResponse:
    from app.audit.kinds.registry import KINDS

    return JSONResponse({"kinds": list(KINDS), "examples": examples()})


def _docs_page(title: str, css: list[str], scripts: list[str], body: str) -> HTMLResponse:
    links = "".join(f'<link rel="stylesheet" href="{_asset(c)}">' for c in css)
    tags = "".join(f'<script src="{_asset(s)}" defer></script>' for s in scripts)
    return HTMLResponse(
        f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><link rel="icon" href="data:,">{links}{tags}</head>
<body>{body}</body></html>
"""
    )


@router.get("/docs")
def swagger_ui() -> HTMLResponse:
    """Swagger UI from the vendored swagger-ui-dist (no CDN); started by static/js/swagger-init.js."""
    return _docs_page(
        "iclaudit · API docs",
        ["vendor/swagger-ui/swagger-ui.css", "css/docs.css"],
        ["vendor/swagger-ui/swagger-ui-bundle.js", "js/swagger-init.js"],
        '<p class="back"><a href="/ui">← dashboard</a> · <a href="/redoc">ReDoc</a></p>'
        '<div id="swagger-ui" data-spec="/openapi.json"></div>',
    )


@router.get("/redoc")
def redoc() -> HTMLResponse:
    """ReDoc's standalone bundle, vendored; it reads the spec from `spec-url`."""
    return _docs_page(
        "iclaudit · API reference",
        ["css/docs.css"],
        ["vendor/redoc/redoc.standalone.js"],
        '<p class="back"><a href="/ui">← dashboard</a> · <a href="/docs">Swagger UI</a></p>'
        '<redoc spec-url="/openapi.json" disable-search-index hide-download-button="false"></redoc>',
    )


def install_ui(app: FastAPI) -> None:
    """Mount the pages, /docs, /redoc and the static files (create the app with docs_url=None)."""
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
