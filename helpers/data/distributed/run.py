"""What the ranks saw: :class:`RankRecord` per rank, gathered into :class:`DistRun`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...timing.timeline import Timeline


@dataclass
class RankRecord:
    rank: int
    origin: float  #: the recording's start on the machine's monotonic clock
    timeline: Timeline
    ids: list[list[int]]  #: the sample ids of each epoch, in the order the rank trained on them
    sync_waits: list[float]  #: per step, seconds the rank waited in all_reduce
    sync_spans: list[tuple[float, float]]  #: per step, (start, end) of the all_reduce (recording's clock)


@dataclass
class DistRun:
    """What one launch produced."""

    world: int
    ranks: list[RankRecord] = field(default_factory=list)
    returncode: int = 0
    output: str = ""  #: torchrun's output (stdout and stderr)
    seconds: float = 0.0
    #: processes of the launch still running 15 s after torchrun ended (stopped by the lab then)
    left_behind: list[int] = field(default_factory=list)
    #: DataLoader workers of each rank in this launch
    workers: dict[int, int] = field(default_factory=dict)

    def root_cause(self) -> dict[str, str]:
        """torchrun's "Root Cause" section of a failed launch, as its ``key : value`` lines.

        torchrun names as the root cause the failure with the smallest timestamp, taken in
        whole seconds (``int(time.time())`` when no error file was written), ties going to
        the lowest rank (``ChildFailedError.get_first_failure`` in
        ``torch/distributed/elastic/multiprocessing/errors``): a peer that failed in the same
        second as the rank that died first can be named instead. :meth:`failures` lists all."""
        at = self.output.find("Root Cause")
        if at < 0:
            return {}
        out = {}
        for line in self.output[at:].splitlines()[1:]:
            if line.startswith("===="):
                break
            if ":" in line:
                key, value = line.split(":", 1)
                out.setdefault(key.strip(), value.strip())
        return out

    def failures(self) -> dict[int, str]:
        """Every failed rank torchrun reported (its "Failures" and "Root Cause" sections): rank →
        its exit code line (e.g. ``"-9 (pid: 123) (SIGKILL)"``)."""
        at = self.output.find("Failures:")
        out: dict[int, str] = {}
        rank = None
        for line in self.output[at:].splitlines() if at >= 0 else []:
            key, _, value = line.partition(":")
            if key.strip() == "rank" and value.strip():
                rank = int(value.split()[0])
            elif key.strip() == "exitcode" and rank is not None:
                out.setdefault(rank, value.strip())
                rank = None
        return out

    def peers_that_saw_it(self) -> set[int]:
        """Ranks whose ``all_reduce`` failed because a peer's connection went away (gloo's read
        error, "Connection reset by peer" or "closed by peer": the line the step prints the moment
        it fails, or the last line of the rank's traceback)."""
        import re

        return {
            int(m.group(1))
            for m in re.finditer(r"^\[rank(\d+)\]: (?:RuntimeError|all_reduce failed after [\d.]+ s): "
                                 r".*Connection (?:reset|closed) by peer",
                                 self.output, flags=re.MULTILINE)
        }

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and len(self.ranks) == self.world

    def epoch_ids(self, epoch: int) -> list[int]:
        """Every rank's ids of an epoch, together."""
        return [i for r in self.ranks for i in r.ids[epoch]]

    def repeated(self, epoch: int = 0) -> int:
        ids = self.epoch_ids(epoch)
        return len(ids) - len(set(ids))

    def same_order_each_epoch(self) -> bool:
        return all(r.ids[0] == r.ids[1] for r in self.ranks if len(r.ids) > 1)

    def steps_per_s(self) -> dict[int, float]:
        """Per rank, steps per second after the first step (start-up left out)."""
        out = {}
        for r in self.ranks:
            b = sorted(r.timeline.batches, key=lambda x: x.ready)
            out[r.rank] = (len(b) - 1) / (b[-1].step_end - b[0].step_end) if len(b) > 1 else float("nan")
        return out

    def median_sync_wait(self) -> dict[int, float]:
        import statistics

        return {r.rank: statistics.median(r.sync_waits[1:] or r.sync_waits) for r in self.ranks}

    def median_fetch(self) -> dict[int, float]:
        import statistics

        return {r.rank: statistics.median(b.fetch_s for b in r.timeline.batches) for r in self.ranks}

    def loop_s(self) -> dict[int, float]:
        """Per rank, the median time its loop took per step without waiting: from one step's end
        to the next, less the wait for data and the wait in ``all_reduce`` for the other ranks —
        the step, the ``all_reduce`` itself and the loop's own work. The pace every rank could
        keep if no rank waited for data."""
        import statistics

        out = {}
        for r in self.ranks:
            b = sorted(r.timeline.batches, key=lambda x: x.ready)
            own = [
                later.step_end - earlier.step_end - later.wait_s - wait
                for earlier, later, wait in zip(b, b[1:], r.sync_waits[1:], strict=False)
            ]
            out[r.rank] = statistics.median(own) if own else float("nan")
        return out
