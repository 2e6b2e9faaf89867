from service.servers import postgres_server, redis_server  # noqa: F401 - fixtures
