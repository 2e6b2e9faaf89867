"""The web interface served by the API process: the dashboard pages under /ui (plain HTML shells and
vanilla JavaScript modules calling the /v1 API) and offline /docs and /redoc (vendored Swagger UI and
ReDoc). No build step: every asset is a file in app/ui/static, vendored ones in static/vendor."""
