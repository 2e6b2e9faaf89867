"""`Connection: close` on every 5xx (pure ASGI)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class CloseOnServerError:
    """`Connection: close` on every 5xx, so a client's next request on a keep-alive connection goes out on
    a fresh one instead of being reset."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 500:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, send_closing)
