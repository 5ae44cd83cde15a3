"""Workers die with their master.

``tollgate serve --workers N`` runs uvicorn's supervisor (the master) and N worker processes
on one port. A master killed with SIGKILL (a container's or host's crash handling, an OOM
kill) cannot stop them: the workers went on serving, orphaned, with nothing to restart them
or to stop them on the next SIGTERM. Each worker therefore asks to be sent SIGTERM when its
parent dies (Linux: ``prctl(PR_SET_PDEATHSIG)``; elsewhere a thread polls the parent's pid
each second, off the event loop) and then shuts down as a SIGTERM always does: in-flight
requests finish, the log is flushed (gateway/reliability/shutdown.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # linux/prctl.h
MASTER_PID_ENV = "TOLLGATE_MASTER_PID"


def _prctl_pdeathsig(sig: int) -> bool:
    """True when the kernel will send ``sig`` to this process at its parent's death."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _poll_parent(parent_pid: int, interval_s: float) -> None:
    stop = threading.Event()
    while not stop.wait(interval_s):
        if os.getppid() != parent_pid:
            _parent_gone(parent_pid)
            return


def _parent_gone(parent_pid: int) -> None:
    log.warning("master process %d is gone: shutting this worker down", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def die_with_parent(parent_pid: int | None = None, interval_s: float = 1.0) -> None:
    """Have SIGTERM sent to this process when ``parent_pid`` (default: the current parent)
    dies. A parent that died before this call is caught too: the process has then been
    re-parented already."""
    parent_pid = parent_pid or os.getppid()
    if not _prctl_pdeathsig(signal.SIGTERM):
        threading.Thread(target=_poll_parent, args=(parent_pid, interval_s), daemon=True,
                         name="parent-watch").start()
    if os.getppid() != parent_pid:  # it died before the kernel was asked to tell us:
        log.warning("master process %d is gone before this worker started: exiting",
                    parent_pid)  # nothing is served or held yet
        os._exit(0)


def master_pid_from_env() -> int | None:
    """The master's pid, as ``serve`` put it in the workers' environment."""
    value = os.environ.get(MASTER_PID_ENV, "")
    return int(value) if value.isdigit() else None
