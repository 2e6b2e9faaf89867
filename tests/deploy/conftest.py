from testkit.servers import postgres_server, redis_server  # noqa: F401 - fixtures
