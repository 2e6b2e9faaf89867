"""Security headers on every answer (app.api.middleware.headers): nosniff, no referrer, no framing, and a
Content Security Policy.

The policies live here, in one place: `CSP` for everything, `CSP_BY_PREFIX` for paths that need more.
"""

from __future__ import annotations

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
"""Scripts only from this app (the dashboard and /docs, /redoc use vendored files, no inline script);
inline styles allowed because Swagger UI and ReDoc inject <style> elements; blob: images are the
dashboard's result plot, fetched with the API key and shown from memory."""
REPORT_CSP = (
    "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
"""The shareable report (report.html): a sandboxed document with no script at all (it carries none), its
own inline style and PNG data URIs only, so text from the audit can never run or load anything."""
CSP_BY_PREFIX: dict[str, str] = {}
"""Path prefix → a different policy, for a page that needs one."""

HEADERS: dict[str, str] = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def csp_for(path: str) -> str:
    return next((csp for prefix, csp in CSP_BY_PREFIX.items() if path.startswith(prefix)), CSP)
