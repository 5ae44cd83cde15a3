"""One line for an error a command ends on, never a traceback.

Why: what a user gets wrong (a `mysql://` URL, a database that does not answer, a benchmark
folder that is not there, a file that cannot be read) ended in 40 lines of frames that name
the gateway's internals and bury the one line that says what to change. Every error a command
raises reaches ``one_line``; the ones a user causes are said in their own words, anything else
as its type and first line, with how to see the traceback (``TOLLGATE_DEBUG=1``).
"""

from __future__ import annotations

import os

DEBUG_ENV = "TOLLGATE_DEBUG"


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _first_line(text: object) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _database_line(e: BaseException) -> str | None:
    """The sqlalchemy errors a URL or an unreachable server causes; None for any other."""
    import sys

    if "sqlalchemy" not in sys.modules:  # nothing touched a database
        return None
    from sqlalchemy import exc

    if isinstance(e, exc.NoSuchModuleError):
        return (f"unsupported database URL ({_first_line(e)}): use sqlite:///path or "
                "postgresql://user@host/db")
    if isinstance(e, exc.ArgumentError):
        return (f"not a database URL ({_first_line(e)}): use sqlite:///path or "
                "postgresql://user@host/db")
    if isinstance(e, (exc.OperationalError, exc.InterfaceError)):
        cause = _first_line(getattr(e, "orig", None) or e)
        return (f"database unreachable: {cause} (check --database-url, "
                "TOLLGATE_DATABASE_URL or the config's database_url)")
    if isinstance(e, exc.ProgrammingError):
        return (f"database error: {_first_line(getattr(e, 'orig', None) or e)} "
                "(is the schema current? `tollgate db upgrade`)")
    return None


def one_line(e: BaseException) -> str:
    """What to print for ``e``, an exception a command raised (not a click one)."""
    if (line := _database_line(e)) is not None:
        return line
    if isinstance(e, ModuleNotFoundError):
        return (f"the optional package {e.name!r} is not installed "
                "(./scripts/install.sh installs every locked package)")
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.strerror}: {e.filename}"
    if isinstance(e, (ValueError, OSError)):  # raised with a message for the user
        return _first_line(e) or type(e).__name__
    return (f"{type(e).__name__}: {_first_line(e)} "
            f"({DEBUG_ENV}=1 shows the traceback)")
