"""Security headers on every answer (pure ASGI): nosniff, no referrer, no framing, and a Content Security
Policy. A route (or a page of the dashboard) that sets a header itself keeps its own value.

The policies live here, in one place: `CSP` for everything, `CSP_BY_PREFIX` for paths that need more.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

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


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
        extra.append((b"content-security-policy", csp_for(scope["path"]).encode()))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                added = [(k, v) for k, v in extra if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
