"""``torch.profiler`` interop: :func:`profile` records a run under the profiler and writes one trace
with the profiler's ``enumerate(DataLoader)#…__next__`` spans beside the lab's waits."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from .recorder import record
from .timeline import Timeline


# -- torch.profiler interop ----------------------------------------------------------------------
def profile(
    loader: DataLoader,
    step: Callable[[Any], Any] | None = None,
    *,
    steps: int = 50,
    path: str | os.PathLike = "dataloader_trace.json",
) -> tuple[Timeline, list[dict], Path]:
    """Record ``loader`` under ``torch.profiler`` and write one trace with the profiler's events
    and the lab's (shifted onto the profiler's clock by the first DataLoader span). Returns the
    timeline, the profiler's DataLoader spans (``enumerate(DataLoader)#…__next__``) and the path."""
    import tempfile

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        timeline = record(loader, step, max_batches=steps, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "profiler.json"
        prof.export_chrome_trace(str(raw))
        profiler_trace = json.loads(raw.read_text())
        ours = Path(tmp) / "lab.json"
        timeline.to_chrome_trace(ours)
        lab_trace = json.loads(ours.read_text())
    events = profiler_trace["traceEvents"] if isinstance(profiler_trace, dict) else profiler_trace
    spans = sorted(
        (
            e
            for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("enumerate(DataLoader)#")
        ),
        key=lambda e: e["ts"],
    )
    waits = sorted(
        (e for e in lab_trace["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("wait ")),
        key=lambda e: e["ts"],
    )
    offset = spans[0]["ts"] - waits[0]["ts"] if spans and waits else 0.0
    for e in lab_trace["traceEvents"]:
        if "ts" in e:
            e["ts"] += offset
        e["pid"] = "DataLoader Lab"
    merged = {"traceEvents": events + lab_trace["traceEvents"], "displayTimeUnit": "ms"}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged))
    return timeline, spans, out


def profiler_agreement(timeline: Timeline, spans: list[dict]) -> list[float]:
    """Per batch, the profiler's ``__next__`` span minus the lab's wait for it (seconds)."""
    waits = [b.wait_s for b in sorted(timeline.batches, key=lambda b: b.wait_start)]
    return [s["dur"] / 1e6 - w for s, w in zip(spans, waits, strict=False)]
