"""Server-side numbers: CPU and RSS from ``/proc/PID`` (local servers), and ``/metrics``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .stats import counter_delta, histogram_quantiles, labelled_deltas, parse_metrics

__all__ = ["ProcSampler", "fetch_metrics", "find_listening_pid", "metrics_report"]

_LOCAL = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}


def find_listening_pid(host: str, port: int) -> int | None:
    """The PID of the local process listening on ``port`` (Linux ``/proc``), if any."""
    if host not in _LOCAL:
        return None
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == (port)
            ):
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(entry.name)
        except OSError:
            continue
    return None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class ProcSampler:
    """CPU seconds and RSS of one process: a baseline, samples, and a report."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu_start = cpu_seconds(pid)
        self.rss_start = rss_bytes(pid)
        self.rss_peak = self.rss_start
        self.samples = 1

    def sample(self) -> None:
        try:
            self.rss_peak = max(self.rss_peak, rss_bytes(self.pid))
            self.samples += 1
        except OSError:
            pass

    def report(self, wall_s: float, sessions: int) -> dict[str, Any]:
        self.sample()
        try:
            cpu = cpu_seconds(self.pid) - self.cpu_start
        except OSError:
            return {"source": "proc", "pid": self.pid, "error": "process gone"}
        n = max(1, sessions)
        percent = cpu / wall_s * 100.0 if wall_s > 0 else None
        return {
            "source": "proc",
            "pid": self.pid,
            "shared_with_bench": self.pid == os.getpid(),
            "cpu_s": round(cpu, 3),
            "cpu_percent": round(percent, 1) if percent is not None else None,
            "cpu_percent_per_session": round(percent / n, 3) if percent is not None else None,
            "cpu_ms_per_session_second": round(cpu * 1000.0 / n / wall_s, 3) if wall_s else None,
            "rss_start_bytes": self.rss_start,
            "rss_peak_bytes": self.rss_peak,
            "rss_per_session_bytes": round((self.rss_peak - self.rss_start) / n),
        }


async def fetch_metrics(http_url: str, api_key: str | None = None) -> dict[str, float] | None:
    """``GET /metrics`` parsed; ``None`` when the server has none."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.get(f"{http_url}/metrics", headers=headers)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return parse_metrics(response.text)
    except ValueError:
        return None


def metrics_report(
    before: dict[str, float] | None, after: dict[str, float] | None, sessions: int
) -> dict[str, Any] | None:
    """What the server's own metrics say happened between two scrapes."""
    if before is None or after is None:
        return None
    n = max(1, sessions)
    events = counter_delta(before, after, "omniduplex_events_sent_total")
    return {
        "sessions_admitted": counter_delta(before, after, "omniduplex_sessions_admitted_total"),
        "sessions_rejected": labelled_deltas(
            before, after, "omniduplex_sessions_rejected_total", "code"
        ),
        "sessions_active_end": after.get("omniduplex_sessions_active"),
        "appends": counter_delta(before, after, "omniduplex_appends_total"),
        "events_sent": events,
        "events_sent_per_session": round(events / n, 1),
        "events_sent_by_type": labelled_deltas(
            before, after, "omniduplex_events_sent_total", "type"
        ),
        "resumes": counter_delta(before, after, "omniduplex_resumes_total"),
        "outbox_drops": counter_delta(before, after, "omniduplex_outbox_drops_total"),
        "journal_bytes_end": after.get("omniduplex_journal_bytes"),
        "reply_latency_ms": histogram_quantiles(before, after, "omniduplex_reply_latency_seconds"),
        "barge_in_stop_ms": histogram_quantiles(before, after, "omniduplex_barge_in_stop_seconds"),
    }
