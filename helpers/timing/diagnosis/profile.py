"""Where a sample's time goes, function by function, on the learner's loader as it is.

:func:`profile_samples` builds a few batches of a copy of the loader — the same dataset, sampler,
``collate_fn``, ``worker_init_fn``, workers and start method — under ``cProfile``, in its own workers
(or in this process with 0 workers): the same conditions as the run, workers beside each other
included (a lock they share shows as the time they wait for it). Each worker profiles its first
batches; then it watches the learner's costliest functions for a few more (each call's arguments and
result, fingerprinted: the same every time is work a cache or ``__init__`` could do once), counts
the files it opens (an audit hook) and the pixels its image decoder produces. What it sends back is
plain data (:class:`RawProfile`); :mod:`.profiled` reads it. Nothing of the learner's code changes
outside those throwaway workers, except, with 0 workers, an audit hook that stays silent after.
"""

from __future__ import annotations

import cProfile
import hashlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..device import tensors_in

#: Batches each worker builds under the profiler, then batches it watches the costliest functions for.
PROFILED, WATCHED = 1, 1
#: The most batches in all, and the most seconds the pass may spend building them (it stops there).
MOST_BATCHES, BUDGET_S = 8, 1.5
#: The learner's functions watched for repeated arguments: this many, the costliest first.
WATCH = 4
#: How often the line sampler looks at the profiled thread (s), and the switch interval it sets meanwhile
#: so that it gets its turn at the GIL.
LINE_EVERY_S = 0.0005


@dataclass
class RawProfile:
    """What the workers sent back: profiler entries (summed), the batches and samples they cover, and
    what the watch saw."""

    entries: dict[tuple, dict] = field(default_factory=dict)  #: key -> {calls, total, inline, callees}
    batches: int = 0
    samples: int = 0
    watched: dict[tuple, dict] = field(default_factory=dict)  #: key -> {calls, args: set, results: set}
    opened: dict[str, int] = field(default_factory=dict)  #: path -> times opened
    output_elements: int = 0  #: tensor elements in the watched batches
    output_bytes: int = 0
    watched_samples: int = 0
    decoded_elements: int = 0  #: pixel values an image decoder produced in the watched batches
    wall_s: float = 0.0  #: the pass's own time
    #: (file, line, function) of the learner's code the profiled thread was running -> times seen there
    lines: dict[tuple, int] = field(default_factory=dict)


def code_key(code: Any) -> tuple:
    """A profiler entry's code as plain data: (file, line, qualified name) or ("~", 0, builtin's name)."""
    if isinstance(code, str):
        return ("~", 0, code)
    return (code.co_filename, code.co_firstlineno, getattr(code, "co_qualname", code.co_name))


def entries_of(profiler: cProfile.Profile) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for e in profiler.getstats():
        callees = {code_key(c.code): c.totaltime for c in (e.calls or [])}
        out[code_key(e.code)] = {"calls": e.callcount, "total": e.totaltime, "inline": e.inlinetime,
                                 "callees": callees}
    return out


def merge_entries(into: dict[tuple, dict], more: dict[tuple, dict]) -> None:
    for key, e in more.items():
        have = into.setdefault(key, {"calls": 0, "total": 0.0, "inline": 0.0, "callees": {}})
        have["calls"] += e["calls"]
        have["total"] += e["total"]
        have["inline"] += e["inline"]
        for callee, seconds in e["callees"].items():
            have["callees"][callee] = have["callees"].get(callee, 0.0) + seconds


# -- fingerprints: the same argument twice reads the same -------------------------------------------
def fingerprint(value: Any, depth: int = 0) -> str:
    """A short digest of a value: equal for equal numbers, strings, bytes and small containers, for
    arrays and tensors with equal contents (up to 4 MiB; larger ones by identity), and for the same
    object otherwise. A digest by identity starts with ``id:`` (two equal objects made anew read
    apart)."""
    digest = hashlib.blake2b(digest_size=8)
    if value is None or isinstance(value, (bool, int, float, complex)):
        digest.update(repr(value).encode())
    elif isinstance(value, (str, bytes)):
        digest.update(value.encode() if isinstance(value, str) else value)
    elif isinstance(value, (tuple, list)) and depth < 2 and len(value) <= 64:
        for item in value:
            digest.update(fingerprint(item, depth + 1).encode())
    elif isinstance(value, dict) and depth < 2 and len(value) <= 64:
        for key, item in value.items():
            digest.update(fingerprint(key, depth + 1).encode() + fingerprint(item, depth + 1).encode())
    elif hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "tobytes") or hasattr(
            value, "numpy"):
        try:
            array = value.detach().cpu().numpy() if hasattr(value, "detach") else value
            if array.nbytes > 4 * 2**20:
                raise ValueError
            digest.update(repr((array.shape, str(array.dtype))).encode() + array.tobytes())
        except Exception:  # noqa: BLE001 - too large, or not an array after all: by identity
            return f"id:{id(value):x}"
    else:
        return f"id:{type(value).__qualname__}:{id(value):x}"
    return digest.hexdigest()


class _Watched:
    """A wrapper that records each call's arguments and result (fingerprinted) before passing it on."""

    def __init__(self, function: Any, record: dict, skip_self: bool):
        self.function, self.record, self.skip_self = function, record, skip_self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.function(*args, **kwargs)
        shown = args[1:] if self.skip_self else args
        self.record["calls"] += 1
        self.record["args"].add(fingerprint((tuple(shown), kwargs)))
        self.record["results"].add(fingerprint(result))
        return result

    def __get__(self, instance: Any, owner: Any = None) -> Any:  # a method stays a method
        if instance is None:
            return self
        return lambda *args, **kwargs: self(instance, *args, **kwargs)


def _owner(code: Any) -> tuple[Any, str] | None:
    """Where the function of ``code`` is looked up when called (its module, or its class), and its
    name there; None for a function defined inside another (nothing to patch)."""
    qualname = getattr(code, "co_qualname", code.co_name)
    if "<locals>" in qualname or "<" in qualname:
        return None
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == code.co_filename:
            owner, *path = [module, *qualname.split(".")[:-1]]
            for part in path:
                owner = getattr(owner, part, None)
                if owner is None:
                    return None
            return owner, qualname.rsplit(".", 1)[-1]
    return None


# -- in each worker (or in this process with 0 workers) ---------------------------------------------
class _State:
    """The profiling of one process: phase, profiler, what is watched, and how to undo the watch."""

    def __init__(self, library: tuple[str, ...]):
        self.library = library
        self.batches = 0
        self.profiler: cProfile.Profile | None = cProfile.Profile()
        self.watched: dict[tuple, dict] = {}
        self.opened: dict[str, int] = {}
        self.counting = False
        self.decoded = 0
        self.undo: list[tuple[Any, str, Any]] = []  #: (owner, name, what was there)
        self.lines: dict[tuple, int] = {}
        self._sampling: threading.Event | None = None
        self._switch = sys.getswitchinterval()
        sys.addaudithook(self._audit)

    def start(self) -> None:
        """Profile this thread: cProfile for functions, and a thread that samples which line of the
        learner's code it runs (cProfile sees functions, not lines)."""
        self.profiler.enable()
        self._sampling = threading.Event()
        sys.setswitchinterval(LINE_EVERY_S)
        threading.Thread(target=self._sample_lines, args=(threading.get_ident(), self._sampling),
                         name="dataloader-lab line sampler", daemon=True).start()

    def stop_sampling(self) -> None:
        if self._sampling is not None:
            self._sampling.set()
            self._sampling = None
            sys.setswitchinterval(self._switch)

    def _sample_lines(self, target: int, done: threading.Event) -> None:
        while not done.is_set():
            frame = sys._current_frames().get(target)
            while frame is not None:
                path = frame.f_code.co_filename
                if path[:1] != "<" and not path.startswith(self.library):
                    key = (path, frame.f_lineno, getattr(frame.f_code, "co_qualname", frame.f_code.co_name))
                    self.lines[key] = self.lines.get(key, 0) + 1
                    break
                frame = frame.f_back
            del frame
            done.wait(LINE_EVERY_S)

    def stop(self) -> None:
        """Put back what the watch replaced, and stop counting (the audit hook stays, silent)."""
        self.counting = False
        self.stop_sampling()
        if self.profiler is not None:
            self.profiler.disable()
        for owner, name, original in reversed(self.undo):
            setattr(owner, name, original)
        self.undo.clear()

    def _audit(self, event: str, args: tuple) -> None:
        if self.counting and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            self.opened[path] = self.opened.get(path, 0) + 1

    def start_watching(self, entries: dict[tuple, dict]) -> None:
        """Wrap the learner's costliest functions (by cumulative time) to record their arguments."""
        users = sorted((key for key in entries if key[0][:1] not in ("~", "<")
                        and not key[0].startswith(self.library)),
                       key=lambda key: -entries[key]["total"])[:WATCH]
        codes = {code_key(c.code): c.code for c in self.profiler.getstats() if not isinstance(c.code, str)}
        for key in users:
            code = codes.get(key)
            place = _owner(code) if code is not None else None
            if place is None:
                continue
            owner, name = place
            function = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
            if not callable(function) or isinstance(function, (staticmethod, classmethod)):
                continue
            record = {"calls": 0, "args": set(), "results": set()}
            self.watched[key] = record
            self.undo.append((owner, name, function))
            setattr(owner, name, _Watched(function, record, skip_self=name == "__init__"))
        self._watch_decoders()
        self.counting = True

    def _watch_decoders(self) -> None:
        """Count the pixel values PIL decodes from files (``ImageFile.load`` decodes; ``draft`` first
        makes it decode fewer)."""
        image_file = sys.modules.get("PIL.ImageFile")
        if image_file is None:
            return
        load, state = image_file.ImageFile.load, self

        def counted_load(self_image, *args, **kwargs):
            result = load(self_image, *args, **kwargs)
            width, height = self_image.size
            state.decoded += width * height * len(self_image.getbands())
            return result

        self.undo.append((image_file.ImageFile, "load", load))
        image_file.ImageFile.load = counted_load


_STATE: dict[int, _State] = {}


def _library_paths() -> tuple[str, ...]:
    """Files that are not the learner's: the standard library, installed packages, and the lab's
    instrument (its wrappers show in every profile)."""
    import sysconfig

    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # helpers/timing
    return tuple(sorted(paths))


class ProfilingInit:
    """``worker_init_fn`` of the profiling copy: the learner's own first, then the profiler on."""

    def __init__(self, user_init: Any, library: tuple[str, ...]):
        self.user_init, self.library = user_init, library

    def __call__(self, worker_id: int) -> None:
        if self.user_init is not None:
            self.user_init(worker_id)
        state = _STATE[os.getpid()] = _State(self.library)
        state.start()


class ProfilingCollate:
    """``collate_fn`` of the profiling copy: the learner's own, then, at the end of each batch, what the
    profiler or the watch saw since the batch before, sent instead of the batch."""

    def __init__(self, collate_fn: Any, library: tuple[str, ...]):
        self.collate_fn, self.library = collate_fn, library

    def __call__(self, samples: Any) -> dict:
        state = _STATE[os.getpid()]  # made by ProfilingInit in a worker, by profile_samples without
        out = self.collate_fn(samples)
        count = len(samples) if isinstance(samples, (list, tuple)) else 1
        state.batches += 1
        report: dict[str, Any] = {"samples": count}
        if state.profiler is not None:
            if state.batches >= PROFILED:  # the profiled batches are done: what they cost, then watch
                state.profiler.disable()
                state.stop_sampling()
                report["entries"] = entries_of(state.profiler)
                report["lines"] = dict(state.lines)
                state.start_watching(report["entries"])
                state.profiler = None
        else:
            elements = [t.nelement() for t in tensors_in(out)]
            report.update(watched={k: dict(v) for k, v in state.watched.items()}, opened=dict(state.opened),
                          elements=sum(elements), nbytes=sum(t.element_size() * t.nelement()
                                                           for t in tensors_in(out)),
                          decoded=state.decoded)
            state.opened.clear()
            state.decoded = 0
            for record in state.watched.values():
                record["calls"], record["args"], record["results"] = 0, set(), set()
        return report


# -- in this process -------------------------------------------------------------------------------
def profile_samples(loader: Any) -> RawProfile | None:
    """Profile a copy of ``loader`` (see the module docstring): each worker builds ``PROFILED``
    batches under the profiler and ``WATCHED`` more under the watch; with 0 workers this process does,
    and puts back what it replaced. At most ``MOST_BATCHES`` batches and about ``BUDGET_S`` seconds.
    None when it cannot be done (the profile is extra: it never stops a diagnosis)."""
    from .loaders import with_changes

    library = _library_paths()
    workers = loader.num_workers
    wanted = min(MOST_BATCHES, (PROFILED + WATCHED) * max(workers, 1))
    raw, start = RawProfile(), time.perf_counter()
    state = None
    try:
        if workers == 0:
            state = _STATE[os.getpid()] = _State(library)
            copy = with_changes(loader, collate_fn=ProfilingCollate(loader.collate_fn, library),
                                pin_memory=False)
            state.start()
        else:
            copy = with_changes(loader, collate_fn=ProfilingCollate(loader.collate_fn, library),
                                worker_init_fn=ProfilingInit(loader.worker_init_fn, library),
                                persistent_workers=False, pin_memory=False)
        for report in copy:
            _add(raw, report)
            if raw.batches >= wanted or time.perf_counter() - start > BUDGET_S:
                break
    except Exception:  # noqa: BLE001 - the learner's loader raised here, or a copy could not be made
        return None
    finally:
        if state is not None:
            state.stop()
            _STATE.pop(os.getpid(), None)
    raw.wall_s = time.perf_counter() - start
    return raw if raw.entries else None


def _add(raw: RawProfile, report: dict) -> None:
    raw.batches += 1
    if "watched" not in report:
        raw.samples += report["samples"]
    if "entries" in report:
        merge_entries(raw.entries, report["entries"])
        for key, times in report.get("lines", {}).items():
            raw.lines[key] = raw.lines.get(key, 0) + times
    if "watched" in report:
        raw.watched_samples += report["samples"]
        raw.output_elements += report["elements"]
        raw.output_bytes += report["nbytes"]
        raw.decoded_elements += report["decoded"]
        for path, times in report["opened"].items():
            raw.opened[path] = raw.opened.get(path, 0) + times
        for key, record in report["watched"].items():
            have = raw.watched.setdefault(key, {"calls": 0, "args": set(), "results": set()})
            have["calls"] += record["calls"]
            have["args"] |= record["args"]
            have["results"] |= record["results"]
