"""Every process of a launch, remembered by pid while it ran (:class:`Descendants`), and
:func:`wait_for_exit`: used by the torchrun launch (notebook 17) and the killed run (notebook 15)."""

from __future__ import annotations

import time


class Descendants:
    """Every process descended from ``pid`` while it runs, remembered by pid and start time (a
    thread looks every ``interval_s``), so that those still running after it ended can be
    found — also when they were re-parented because their parent died (a killed rank's
    DataLoader workers), and whatever their command line (``spawn`` and ``forkserver``
    workers do not carry their rank's)."""

    def __init__(self, pid: int, interval_s: float = 0.05):
        import threading

        self.pid, self.interval_s = pid, interval_s
        self.seen: dict[int, float] = {}  # pid -> create_time (a reused pid is another process)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while True:
            try:
                for child in root.children(recursive=True):
                    try:
                        self.seen.setdefault(child.pid, child.create_time())
                    except psutil.Error:
                        continue
            except psutil.Error:  # the root ended: its descendants are all known by now
                return
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> None:
        """Stop looking (after the root process ended)."""
        self._stop.set()
        self._thread.join()

    def running(self) -> list:
        """The remembered processes that still run (``psutil.Process``; zombies do not count)."""
        import psutil

        alive = []
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                continue
        return alive


def wait_for_exit(
    tag: str | None = None, *, within_s: float, descendants: Descendants | None = None
) -> list[int]:
    """Wait until no process runs whose command line contains ``tag``, or that ``descendants``
    remembered; kill those still running after ``within_s`` seconds and return their pids
    (none: nothing was left)."""
    import psutil

    def running() -> list[psutil.Process]:
        found = {p.pid: p for p in descendants.running()} if descendants is not None else {}
        if tag is None:
            return list(found.values())
        for p in psutil.process_iter(["cmdline", "status"]):
            try:
                if p.info["status"] != psutil.STATUS_ZOMBIE and tag in " ".join(p.info["cmdline"] or []):
                    found.setdefault(p.pid, p)
            except psutil.Error:
                continue
        return list(found.values())

    deadline = time.monotonic() + within_s
    while (alive := running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return [p.pid for p in alive]
