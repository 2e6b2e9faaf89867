"""The API's routers, one module per resource; `app.main.create_app` includes them."""
