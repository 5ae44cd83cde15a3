"""Which database errors mean "the database is unavailable" (retry, answer 503) rather
than "this statement is wrong" (a bug or a constraint)."""

from __future__ import annotations

from sqlalchemy import exc as sa_exc


def is_unavailable(error: BaseException) -> bool:
    """Connection refused/lost, pool exhausted, locked past the busy timeout, server gone."""
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError,
                              sa_exc.TimeoutError, sa_exc.DisconnectionError))
