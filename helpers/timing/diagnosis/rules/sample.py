"""Where a sample's time goes, and what to change there: the profile's costliest function of the
learner's own code, the library call inside it, and the cause it recognises (work repeated with the
same arguments, values converted one by one, a whole file read for a part of it, more decoded than
kept), each with its remedy in the words of what the code does; and, for a pipeline that exposes its
stages (a ``loader`` and a ``Compose``), the costliest stage."""

from __future__ import annotations

from typing import Any

from ..advice import Recommendation, ms
from ..profiled import SampleProfile, line_in
from ..thresholds import LOCK_SHARE, STAGE_SHARE, THROWN_AWAY
from .context import Context

#: Library calls that turn Python values into an array one by one (or bytes into Python values).
CONVERTERS = ("torch.tensor", "torch.as_tensor", "numpy.array", "numpy.asarray", "struct.unpack",
              "struct.iter_unpack", "struct.unpack_from", "array.array", "float", "int")
#: Library calls in which a sample waits rather than computes (I/O, a timer, a socket).
WAITS = ("time.sleep", "select.select", "select.poll", "socket.recv", "socket.recv_into", "SSLSocket.read",
         "SSLSocket.recv_into", "_ssl._SSLSocket.read", "Event.wait", "Condition.wait")
#: Library calls that read or parse a whole file.
READERS = ("numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile", "json.load", "json.loads",
           "pickle.load", "torch.load", "csv.", "pandas.read_", "io.open", "open", "TextIOWrapper.read",
           "BufferedReader.read", "FileIO.read", "zipfile.", "tarfile.", "gzip.", "h5py.", "PIL.Image.open",
           "wave.", "yaml.", "tomllib.")


def _reader(call: str) -> bool:
    return any(call == r or call.startswith(r) for r in READERS)


def cause_of(p: SampleProfile) -> tuple[str, Any, str, Any, Any]:
    """(cause, the cost it removes, remedy, the learner's function to change, the call in it) for the
    profile's costliest chain."""
    culprit, call = p.culprit, p.call
    call_name = call.name if call is not None else ""
    kept = p.output_bytes_per_sample
    whole = p.reopened is not None or (kept > 0 and p.opened_bytes_per_sample >= THROWN_AWAY * kept)
    if call is not None and _reader(call_name) and whole:
        if call_name.startswith("numpy.load"):
            remedy = ("open the file with np.load(path, mmap_mode='r'), so that only the rows a sample "
                      "indexes are read, or load it once per worker, lazily, and keep it")
        else:
            remedy = ("parse each file once per worker, lazily (on its first use in __getitem__), and keep "
                      "what it holds for later samples; or index it, or memory-map it, to read only a "
                      "sample's part")
        return "whole file", culprit, remedy, culprit, call
    if p.repeated is not None:
        return "repeated", p.repeated, (
            f"{p.repeated.name} gets the same arguments every call: build its result once, in the "
            "Dataset's __init__ (or cache it with functools.lru_cache), and reuse it for every sample"), \
            p.repeated, call
    if call is not None and call_name in CONVERTERS:
        return "conversion", call, (
            f"{call_name} turns Python values into a tensor one by one: decode the bytes in one call "
            "with np.frombuffer(buffer, dtype=...) or torch.frombuffer, with no Python object per value"), \
            culprit, call
    if p.decoded_per_sample >= THROWN_AWAY * max(p.output_elements_per_sample, 1):
        decoder = p.decoder or call
        return "thrown away", decoder or culprit, (
            f"it decodes {p.decoded_per_sample / max(p.output_elements_per_sample, 1):.0f}× the values a "
            "sample keeps: decode only what you keep (Image.draft(mode, size) before convert lets the "
            "JPEG decoder work at 1/2, 1/4 or 1/8 of the size; decode only the frames you sample)"), \
            p.decoding_in or culprit, decoder
    if call is not None and call_name in WAITS:
        return "waits", call, (
            f"the sample waits in {call_name} rather than computing: overlap the waits (more workers, or "
            "threads inside each worker: notebook 13), or wait less"), culprit, call
    if call is not None and call_name.startswith("its own Python"):
        return "costly", culprit, (
            "its own Python does the work value by value: compute on whole arrays (NumPy, torch), or, if "
            "it does not depend on the sample, once in __init__"), culprit, call
    return "costly", call or culprit, "make that call cheaper, or do it once for all samples", culprit, call


def chain_to(p: SampleProfile, function: Any) -> str:
    """The chain from the entry point to ``function`` (the whole chain where it is not on it)."""
    names = [str(f) for f in p.chain]
    if function is not None and str(function) not in names:
        return f"{names[0]} → … → {function}" if names and names[0] != str(function) else str(function)
    end = names.index(str(function)) + 1 if function is not None else len(names)
    return " → ".join(names[:end])


def sample_code(c: Context, more_workers_help: bool = False) -> Recommendation | None:
    """The profile's advice, where a sample's cost is what the loop waits for: it waits, the workers
    are busy (or there are none), and the part it names is at least ``STAGE_SHARE`` of a sample. A sample that
    waits (a sleep, a socket) where more workers are advised is left to that advice: more workers
    overlap the waits. ``more_workers_help``: a worker count was advised before this."""
    p = c.d.profile
    if p is None or p.culprit is None or p.lock_share >= LOCK_SHARE:
        return None
    if not (c.input_bound or c.saturated or (c.waiting and c.workers_at_pace)):
        return None
    if c.workers > 0 and not (c.workers_busy or c.saturated):
        return None
    if more_workers_help and p.call is not None and p.call.name in WAITS:
        return None
    if c.collate_heavy and in_collate(c):
        return None  # the collate advice names it
    cause, part, remedy, function, call = cause_of(p)
    share = min(part.share, 1.0)
    if share < STAGE_SHARE:
        return None
    chain = chain_to(p, function)
    inside = call.name if call is not None else "its own code"
    after = c.n * (1 - share)
    if c.workers == 0:
        predicted = after + c.loop_s
    else:
        predicted = max(after / max(min(c.workers, c.cores) if c.cpu_bound else c.workers, 1), c.loop_s)
    signs = {"whole file": _file_signs(p), "repeated": f"{p.repeated.name} was called with the same "
             "arguments for every sample watched" if p.repeated else "",
             "thrown away": f"it decoded {p.decoded_per_sample:,.0f} values a sample for "
             f"{p.output_elements_per_sample:,.0f} kept"}.get(cause, "")
    cores_full = "" if more_workers_help or not c.saturated else (
        f"; the {c.workers} workers already fill the {c.limits.describe()}{c.busy}: more workers cannot help")
    line = line_in(p, function)
    at = f" (the line: {line}, {line.share:.0%} of the samples)" if line is not None else ""
    return Recommendation(
        "sample_cost", f"{chain} spends {ms(share * p.sample_s)} of a sample's {ms(p.sample_s)} in "
        f"{inside}{at}: {remedy}",
        f"profiled on {p.samples} samples where the loader runs them; {part} is {share:.0%} of a sample"
        + (f"; {signs}" if signs else "") + cores_full + f"; without it the model predicts {ms(predicted)} "
        f"per step against {ms(c.d.steady_step_s)} now", None, predicted,
        function=str(function), call=inside, cause=cause)


def _file_signs(p: SampleProfile) -> str:
    if p.reopened is not None:
        path, times = p.reopened
        return f"the same file ({path.rsplit('/', 1)[-1]}) was opened {times} times in a few batches"
    opened, kept = p.opened_bytes_per_sample / 1e6, p.output_bytes_per_sample / 1e6
    return f"it opens {opened:.1f} MB a sample for {kept:.2f} MB kept"


def in_collate(c: Context) -> bool:
    """Whether the profile's costliest chain starts in the loader's ``collate_fn``."""
    p, collate_fn = c.d.profile, c.loader.collate_fn
    if p is None or not p.chain:
        return False
    names = {getattr(collate_fn, "__qualname__", None), f"{type(collate_fn).__qualname__}.__call__"}
    return p.chain[0].name in names


def named(advice: Recommendation, c: Context) -> Recommendation:
    """The collate advice with the profile's chain, call and remedy, where the chain starts there."""
    p = c.d.profile
    if p is None or not in_collate(c):
        return advice
    cause, part, remedy, function, call = cause_of(p)
    chain = chain_to(p, function)
    inside = call.name if call is not None else "its own code"
    return Recommendation(
        advice.knob, f"{advice.advice}: {chain} spends {ms(min(part.share, 1.0) * p.sample_s)} of a sample's "
        f"{ms(p.sample_s)} in {inside}: {remedy}", advice.because, advice.change, advice.predicted_s,
        advice.measure, function=str(function), call=inside, cause=cause)


def remedy(stage: str, device: str | None, images: bool) -> str:
    """The lab's remedy for a costly stage (by its name), fitted to the device and to image data."""
    name = stage.lower()
    if name.startswith("read"):
        return "read from a local disk, or pack small files into shards (notebooks 13, 14)"
    if name.startswith("decode"):
        if images:
            return ("decode once and cache the decoded images (uint8 tensors, on a local disk or in memory), "
                    "decode with torchvision.io.decode_jpeg, or store them smaller (notebook 14)")
        return "decode once and cache the decoded samples (on a local disk or in memory)"
    if any(word in name for word in ("totensor", "normalize", "convertimagedtype", "todtype")):
        return ("hand over uint8 and convert and normalise the whole batch at once"
                + (" on the device (notebook 07)" if device else " in the step (notebook 19)"))
    if device:
        return "apply it to the whole batch on the device (whole-batch tensor operations; notebook 07)"
    return ("make it cheaper (fewer random operations, smaller inputs first) or apply it to the whole "
            "batch at once; this run has no device to move it to")


def stage_advice(stages: dict[str, float], fetch_s: float, per_batch: int, workers: int, loop_s: float,
                 device: str | None, cores: float, images: bool = True) -> Recommendation | None:
    """A recommendation naming the costliest stage of a sample with its share and its remedy, and the
    step the model predicts without it: the fetch shrinks by that stage's share of a sample (its share,
    not its seconds: the stages are timed in one worker, the fetch where the loader runs it, and a
    sample's time differs between the two); with 0 ``workers`` the loop fetches, then steps; with
    workers that compute, they are capped at the cores. None when no stage takes
    :data:`STAGE_SHARE` of a sample."""
    sample_s = sum(stages.values())
    named = {k: v for k, v in stages.items() if k != "the rest of __getitem__"}
    if not named or sample_s <= 0:
        return None
    stage, seconds = max(named.items(), key=lambda kv: kv[1])
    share = seconds / sample_s
    if share < STAGE_SHARE:
        return None
    after_fetch = fetch_s * (1.0 - share)
    predicted = (after_fetch + loop_s if workers == 0
                 else max(after_fetch / max(min(workers, cores), 1.0), loop_s))
    listed = ", ".join(f"{k} {ms(v)}" for k, v in stages.items())
    return Recommendation(
        "sample_stage", f"the costliest stage of a sample is {stage}: {remedy(stage, device, images)}",
        f"timed in a worker, a sample takes {ms(sample_s)}: {listed}; {stage} is {share:.0%} of it, "
        f"about {ms(share * fetch_s)} of the {ms(fetch_s)} a batch takes to fetch here", None, predicted)


def stages(c: Context) -> Recommendation | None:
    """The per-stage view, for a dataset that exposes its stages (measured only where it computes)."""
    d = c.d
    if d.stages is None or d.replay_step_s is None:
        return None
    images = d.profile is None or d.profile.decoded_per_sample > 0 or _pil_dataset(c.loader.dataset)
    return stage_advice(d.stages, d.fetch_mean_s, c.loader.batch_size or 1, c.workers, c.y + c.m, d.device,
                        c.limits.cores, images)


def _pil_dataset(dataset: Any) -> bool:
    """A torchvision folder dataset whose loader reads images (ImageFolder's pil_loader)."""
    loader = getattr(dataset, "loader", None)
    return "pil" in getattr(loader, "__name__", "").lower() or "image" in type(dataset).__name__.lower()
