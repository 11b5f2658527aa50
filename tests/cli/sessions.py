"""The processes of a session, read from /proc: what a CLI test started in a session of its own
(``start_new_session=True``) left running after a signal."""

from __future__ import annotations

from pathlib import Path

from gpuscale.demo.processes import free_ports

__all__ = ["children", "free_port", "in_session"]


def free_port() -> int:
    """One loopback port free now."""
    (port,) = free_ports(1)
    return port


def in_session(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            pids.append(int(entry.name))
    return pids


def children(pid: int) -> list[int]:
    """The other processes of the session led by ``pid``."""
    return [p for p in in_session(pid) if p != pid]
