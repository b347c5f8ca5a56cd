"""What a sample's profile says (:mod:`.profile` measures it): the learner's functions that cost most
per sample, the chain from the dataset's entry point down to the function that spends the time, the
library call (or the function's own Python) inside it, and the signs of the common causes — the same
arguments every call, the same file opened for many samples, more decoded than kept, workers waiting
for a lock. Plain data, for :mod:`.rules`."""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass

from .profile import RawProfile

#: A callee takes over the chain when it spends at least this share of its caller's time.
DESCEND = 0.5
#: Code objects that are part of the function that holds them (a comprehension is its own Python).
INLINE = {"<listcomp>": "a list comprehension", "<dictcomp>": "a dict comprehension",
          "<setcomp>": "a set comprehension", "<genexpr>": "a generator expression", "<lambda>": "a lambda"}
FETCHERS = ("_MapDatasetFetcher.fetch", "_IterableDatasetFetcher.fetch")
#: Library calls that decode compressed data into values (where more can be decoded than is kept).
DECODERS = ("PIL.Image.Image.convert", "PIL.ImageFile.ImageFile.load", "PIL.Image.Image.load",
            "PIL.Image.Image.getdata", "torchvision.io.decode_jpeg", "torchvision.io.decode_image",
            "cv2.imdecode", "cv2.imread", "imageio.imread", "imageio.v3.imread")
LOCKS = re.compile(r"'(acquire|__enter__)' of '(_multiprocessing\.SemLock|_thread\.lock|_thread\.RLock)'")


@dataclass(frozen=True)
class Cost:
    """A function's share of a sample's time: its own file and line for the learner's code."""

    name: str  #: "mel_filterbank", "MelDataset.__getitem__", "torch.tensor", "its own Python (a loop)"
    where: str  #: "audio.py:66" for the learner's code; "" for a library call
    seconds: float  #: per sample, scaled to the run's own fetch time
    share: float  #: of a sample's time
    own_share: float = 0.0  #: of it, the function's own Python (not in what it calls)

    def __str__(self) -> str:
        return f"{self.name} ({self.where})" if self.where else self.name


@dataclass(frozen=True)
class Line:
    """A line of the learner's code and the share of the samples of the profiled thread taken there
    (a sampler looks at which line it runs every half millisecond)."""

    where: str  #: "mysteries.py:42"
    text: str  #: the line itself, stripped
    function: str  #: the function that holds it
    share: float  #: of the samples

    def __str__(self) -> str:
        return f"{self.where} `{self.text}`"


@dataclass(frozen=True)
class SampleProfile:
    """A sample's time, function by function (per sample: the fetch's time divided among its samples)."""

    sample_s: float  #: a sample's time in the run (the fetch's mean over the samples of a batch)
    functions: tuple[Cost, ...]  #: the learner's functions, costliest first (each with what it calls)
    chain: tuple[Cost, ...]  #: entry point → … → the function that spends the time
    call: Cost | None  #: the library call inside it that spends most, or its own Python
    repeated: Cost | None  #: a function of the chain called with the same arguments every time
    opened_per_sample: float  #: files opened per sample
    reopened: tuple[str, int] | None  #: a file opened again and again: (path, times), the most
    opened_bytes_per_sample: float  #: the size of the files opened, per sample
    output_bytes_per_sample: float  #: the tensors a sample ends as
    decoded_per_sample: float  #: pixel values decoded per sample (PIL), 0 when none
    output_elements_per_sample: float
    lock_share: float  #: of a sample's time, waiting for a lock
    samples: int  #: profiled
    lock_call: str = ""  #: the lock's call, as a reader knows it ("SemLock.__enter__")
    locked_in: Cost | None = None  #: the learner's function that waits for it most
    decoder: Cost | None = None  #: the decoding call that costs most (PIL's convert, say), where one ran
    decoding_in: Cost | None = None  #: the learner's function that calls it
    profile_s: float = 0.0  #: the profiling pass's own time (its workers' start-up included)
    lines: tuple[Line, ...] = ()  #: the learner's lines the profiled thread was seen at, most first

    @property
    def culprit(self) -> Cost | None:
        return self.chain[-1] if self.chain else None


def readable(key: tuple) -> str:
    """A profiler key as a reader knows it: ``torch.tensor``, ``struct.unpack``, ``json.load``,
    ``PIL.Image.Image.convert``, ``SemLock.acquire``."""
    path, _, name = key
    if path == "~":
        method = re.match(r"<method '(\w+)' of '(?:[\w.]*\.)?(\w+)' objects>", name)
        if method:
            return f"{method.group(2)}.{method.group(1)}"
        builtin = re.match(r"<built-in method ([\w.]+)>", name)
        if builtin:
            return re.sub(r"(^|\.)_(?=\w)", r"\1", builtin.group(1))  # _struct.unpack -> struct.unpack
        return name.strip("<>{}")
    return f"{module_of(path)}.{name}" if module_of(path) else name


def module_of(path: str) -> str:
    """``numpy/lib/_npyio_impl.py`` → ``numpy``; ``json/__init__.py`` → ``json``; ``PIL/Image.py`` →
    ``PIL.Image``: the dotted module below site-packages or the standard library, private parts left
    out."""
    parts = re.split(r"[\\/]", path)
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            parts = parts[parts.index(anchor) + 1:]
            break
    else:
        lib = [i for i, p in enumerate(parts) if re.fullmatch(r"python3\.\d+", p)]
        if not lib:
            return ""
        parts = parts[lib[-1] + 1:]
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    public = [p for p in parts if not p.startswith("_")]
    return public[0] if public and public[0] in ("numpy", "torch") else ".".join(public)


def where(key: tuple) -> str:
    return f"{os.path.basename(key[0])}:{key[1]}"


def _user(key: tuple, library: tuple[str, ...]) -> bool:
    """The learner's code: a file of theirs (not a builtin "~", a frozen module "<frozen abc>" or code
    compiled from a string "<string>", nor the standard library, installed packages or the lab)."""
    return key[0] != "~" and not key[0].startswith("<") and not key[0].startswith(library)


def read(raw: RawProfile, fetch_s: float, per_batch: int, library: tuple[str, ...]) -> SampleProfile | None:
    """The profile of a sample from the workers' entries; times scaled so that a sample costs what the
    run measured (``fetch_s`` for ``per_batch`` samples): the profiler slows Python code down, and a
    function's share is what it says."""
    entries = raw.entries
    fetched = sum(e["total"] for k, e in entries.items() if k[2] in FETCHERS)
    users = {k: e for k, e in entries.items() if _user(k, library)}
    if not users or raw.samples == 0:
        return None
    total = fetched or max(e["total"] for e in users.values())
    sample_s = fetch_s / max(per_batch, 1)

    def cost(key: tuple, seconds: float, own: float = 0.0) -> Cost:
        share, mine = seconds / total, _user(key, library)
        return Cost(key[2] if mine else readable(key), where(key) if mine else "", share * sample_s, share,
                    own / total)

    functions = tuple(cost(k, e["total"], e["inline"]) for k, e in
                      sorted(users.items(), key=lambda kv: -kv[1]["total"]) if not _inline_name(k))
    # The chain: from the costliest of the learner's functions down, while one callee holds most of it.
    key = max((k for k in users if not _inline_name(k)), key=lambda k: users[k]["total"])
    chain, call = [key], None
    while True:
        own, callees = _own_and_callees(key, entries)
        total_s = users[key]["total"]
        best = max((kv for kv in callees.items() if _user(kv[0], library)), key=lambda kv: kv[1],
                   default=None)
        if best and best[1] >= DESCEND * total_s and best[0] not in chain:
            key = best[0]
            chain.append(key)
            continue
        library_call = max((kv for kv in callees.items() if not _user(kv[0], library)), key=lambda kv: kv[1],
                           default=None)
        if library_call and library_call[1] > own:
            call = cost(*library_call)
        elif own > 0:
            inline = sorted((k for k in users[key]["callees"] if _inline_name(k)),
                            key=lambda k: -entries[k]["total"] if k in entries else 0.0)
            kind = _inline_name(inline[0]) if inline and users[key]["inline"] < own / 2 else None
            call = Cost(f"its own Python ({kind or 'a loop'})", "", own / total * sample_s, own / total)
        break
    costs = tuple(cost(k, users[k]["total"], users[k]["inline"]) for k in chain)
    repeated = next((costs[i] for i in reversed(range(len(chain)))
                     if _same_every_time(raw.watched.get(chain[i]))), None)
    samples = max(raw.watched_samples, 1)
    reopened = max(raw.opened.items(), key=lambda kv: kv[1], default=None)
    sizes = sum(times * _size(path) for path, times in raw.opened.items())
    lock_keys = [k for k in entries if k[0] == "~" and LOCKS.search(k[2])]
    locks = sum(entries[k]["total"] for k in lock_keys)
    lock_call, locked_in = "", None
    if lock_keys:
        lock = max(lock_keys, key=lambda k: entries[k]["total"])
        lock_call = readable(lock)
        waiting = {k: sum(t for c, t in _own_and_callees(k, entries)[1].items() if c in lock_keys)
                   for k in users if not _inline_name(k)}
        holder = max(waiting, key=waiting.get, default=None)
        if holder is not None and waiting[holder] > 0:
            locked_in = cost(holder, users[holder]["total"], users[holder]["inline"])
    decoder, decoding_in, spent = None, None, 0.0
    for k in users:
        if _inline_name(k):
            continue
        for callee, seconds in _own_and_callees(k, entries)[1].items():
            if not _user(callee, library) and readable(callee) in DECODERS and seconds > spent:
                decoder, spent = cost(callee, seconds), seconds
                decoding_in = cost(k, users[k]["total"], users[k]["inline"])
    return SampleProfile(
        sample_s=sample_s, functions=functions, chain=costs, call=call, repeated=repeated,
        opened_per_sample=sum(raw.opened.values()) / samples,
        reopened=reopened if reopened and reopened[1] >= 2 else None,
        opened_bytes_per_sample=sizes / samples, output_bytes_per_sample=raw.output_bytes / samples,
        decoded_per_sample=raw.decoded_elements / samples,
        output_elements_per_sample=raw.output_elements / samples,
        lock_share=locks / total, samples=raw.samples, lock_call=lock_call, locked_in=locked_in,
        decoder=decoder, decoding_in=decoding_in, profile_s=raw.wall_s, lines=_lines(raw.lines))


def _own_and_callees(key: tuple, entries: dict[tuple, dict]) -> tuple[float, dict[tuple, float]]:
    """A function's own Python time, with the comprehensions and lambdas it holds, and what it calls
    (through them too): seconds."""
    e = entries[key]
    own, callees = e["inline"], {}
    for callee, seconds in e["callees"].items():
        if _inline_name(callee) and callee in entries:
            inner_own, inner = _own_and_callees(callee, entries)
            own += inner_own
            for k, t in inner.items():
                callees[k] = callees.get(k, 0.0) + t
        else:
            callees[callee] = callees.get(callee, 0.0) + seconds
    return own, callees


def _inline_name(key: tuple) -> str | None:
    last = key[2].rsplit(".", 1)[-1]
    return INLINE.get(last)


def _same_every_time(record: dict | None) -> bool:
    """Called at least three times, always with the same arguments, and with the same result where
    results compare by value (a new container each call compares by identity: not counted)."""
    if not record or record["calls"] < 3 or len(record["args"]) != 1:
        return False
    return len({r for r in record["results"] if not r.startswith("id:")}) <= 1


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _lines(seen: dict[tuple, int], most: int = 5) -> tuple[Line, ...]:
    """The lines the sampler saw most, with their text (from the file, as it is now). A line seen in a
    comprehension and in the function that holds it counts once, under that function."""
    total = sum(seen.values())
    merged: dict[tuple[str, int], list] = {}
    for (path, line, function), times in seen.items():
        have = merged.setdefault((path, line), [function, 0])
        have[1] += times
        if "<locals>" in have[0] and "<locals>" not in function:
            have[0] = function
    ranked = sorted(merged.items(), key=lambda kv: -kv[1][1])[:most]
    return tuple(Line(f"{os.path.basename(path)}:{line}", linecache.getline(path, line).strip(),
                      function.split(".<locals>")[0], times / total)
                 for (path, line), (function, times) in ranked if total)


def line_in(profile: SampleProfile, function: Cost | None) -> Line | None:
    """The line the sampler saw most inside ``function`` (the top line overall without one)."""
    if not profile.lines:
        return None
    name = function.name if function is not None else None
    return next((line for line in profile.lines if line.function == name), None if name else profile.lines[0])
