"""What a rule says: :class:`Recommendation`, and how advice writes times and changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Recommendation:
    knob: str  #: what to change: "num_workers", "prefetch_factor", "persistent_workers", "sample_code", ...
    advice: str  #: the change, in words
    because: str  #: the measured number that triggered it
    #: the DataLoader arguments that follow it (None: a change to code, not to a setting)
    change: dict[str, Any] | None = None
    #: the time per step the lab's model predicts after the change (s; None: no prediction)
    predicted_s: float | None = None
    #: what the prediction is about: "steady" (time per step once each epoch's first batch is in
    #: hand and every worker is up) or "run" (the whole run's wall time per step, start-up included)
    measure: str = "steady"
    #: for advice on the learner's code: the function that spends the time ("mel_filterbank (audio.py:66)")
    function: str | None = None
    #: ...and the library call inside it, or "its own Python (a loop)"
    call: str | None = None
    #: ...and the cause the profile recognised: "repeated", "conversion", "whole file", "thrown away",
    #: "serialised", or "costly"
    cause: str | None = None


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def describe_change(change: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (change or {}).items())
