from testkit.servers import database_url, postgres_server  # noqa: F401 - fixtures
