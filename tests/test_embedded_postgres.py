"""Which PostgreSQL tests, benchmarks and the demo use (lagd.embedded.services): the machine's own only
when it lets them in, else one of their own."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from lagd.embedded import services as embedded
from lagd.embedded.services import system_postgres


def test_a_listening_server_that_does_not_let_user_postgres_in_is_not_used() -> None:
    """A port that listens but lets no one in (here a server that never answers; Debian's
    PostgreSQL asking for a password is the same to the caller) is not the machine's PostgreSQL."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert system_postgres(port=server.getsockname()[1]) is None


def test_a_server_that_lets_user_postgres_in_is_used(postgres: embedded.Postgres) -> None:
    port = urlsplit(postgres.url).port
    assert port is not None
    found = system_postgres(port=port)
    assert found is not None and urlsplit(found.url).port == port
