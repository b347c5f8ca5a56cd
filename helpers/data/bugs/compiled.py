"""The ragged last batch under ``torch.compile`` (notebook 18, section 3).

A dataset whose length is not a multiple of the batch size ends every epoch with a shorter batch.
``torch.compile`` specialises the code it makes to the shapes it saw (Dynamo guards on them): the
short batch fails a guard, and the step compiles again — on the loop's timeline, one step that
takes as long as a compile. :class:`CompiledStep` trains a small model through ``torch.compile``
on the CPU and counts what Dynamo compiled (:func:`helpers.timing.torch_internals.compile_events`);
the fixes are ``drop_last=True``, :class:`PadToBatch` (pad the short batch, mask its padding out of
the loss) and a batch dimension marked dynamic before the first compile.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, default_collate

from ...config import is_smoke
from ...timing.timeline import Timeline
from ...timing.torch_internals import CompileEvent, compile_events, mark_batch_dynamic, reset_compiles


class Features(Dataset):
    """``length`` samples ``(x, y, i)``: ``features`` floats, a class label in ``range(classes)`` and
    the sample's id, all fixed by ``seed`` (made once here; workers only read them)."""

    def __init__(self, length: int, features: int = 64, classes: int = 10, seed: int = 0):
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"length must be a positive integer, got {length!r}")
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(length, features, generator=generator)
        self.y = torch.randint(0, classes, (length,), generator=generator)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[index], self.y[index], int(index)


class PadToBatch:
    """A ``collate_fn`` that stacks samples as the default does and pads a short batch to
    ``batch_size`` rows, with a mask that says which rows are real: ``(x, y, ids, keep)``."""

    def __init__(self, batch_size: int):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size

    def __call__(self, samples: list) -> tuple[torch.Tensor, ...]:
        x, y, ids = default_collate(samples)
        missing = self.batch_size - len(samples)
        keep = torch.ones(self.batch_size, dtype=torch.bool)
        if missing > 0:  # the epoch's last batch: pad it to the shape every other batch has
            x = torch.cat([x, x.new_zeros(missing, *x.shape[1:])])
            y = torch.cat([y, y.new_zeros(missing)])
            ids = torch.cat([ids, ids.new_full((missing,), -1)])
            keep[len(samples):] = False
        return x, y, ids, keep


#: The CompiledStep whose compiles Dynamo's record holds now (a new one resets the record).
_current: CompiledStep | None = None


class CompiledStep:
    """A training step of a small MLP compiled with ``torch.compile(model, backend=backend)``, on the
    CPU. It takes ``(x, y, ids)`` or :class:`PadToBatch`'s ``(x, y, ids, keep)``; with
    ``dynamic_batch=True`` it marks each batch's dimension 0 dynamic before the compiled call.

    Making one forgets every earlier compile (:func:`~helpers.timing.torch_internals.reset_compiles`),
    so that its :attr:`compiles` are its own; ``trained`` counts how often each sample id was
    trained on, read from the loss itself: the rows of the batch its gradient reached (a padding row
    the mask leaves out gets a gradient of exactly zero; one the loss counts, under id -1, does not)."""

    def __init__(self, *, features: int = 64, hidden: int = 256, classes: int = 10, backend: str = "eager",
                 dynamic_batch: bool = False, seed: int = 0):
        global _current
        if _current is not None:  # keep the previous step's record before it is cleared
            _current.kept = compile_events()
        reset_compiles()
        _current = self
        self.kept: list[CompileEvent] | None = None  # its compiles, once a newer step reset the record
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
        self.compiled = torch.compile(self.model, backend=backend)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.backend, self.dynamic_batch = backend, dynamic_batch
        self.trained: Counter[int] = Counter()

    def __call__(self, batch: Any) -> None:
        x, y, ids, *padding = batch
        keep = padding[0] if padding else torch.ones(len(ids), dtype=torch.bool)
        x = x.detach().requires_grad_()  # to see which rows the loss reached
        if self.dynamic_batch:
            mark_batch_dynamic(x)
        losses = nn.functional.cross_entropy(self.compiled(x), y, reduction="none")
        loss = (losses * keep).sum() / keep.sum()  # padded rows count for nothing
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        reached = x.grad.abs().sum(dim=tuple(range(1, x.dim()))) > 0
        self.trained.update(ids[reached].tolist())

    @property
    def compiles(self) -> list[CompileEvent]:
        """Every frame Dynamo compiled for this step, in order (first compile, then recompiles)."""
        return self.kept if self.kept is not None else compile_events()

    @property
    def recompiles(self) -> list[CompileEvent]:
        return [e for e in self.compiles if e.recompile]


def compile_backend() -> tuple[str, str]:
    """The backend notebook 18 compiles with, and why: ``"eager"`` in smoke mode (Dynamo captures and
    guards exactly as with any backend, so the recompiles are the same; each compile costs only
    Dynamo's tracing); at full size ``"inductor"`` where its C++ compiler is found (generated code,
    built by that compiler: seconds per compile), else ``"aot_eager"`` (also traces the backward)."""
    if is_smoke():
        return "eager", "quick mode: Dynamo's capture and guards only (the recompiles are the same)"
    if sys.platform == "win32":
        return "aot_eager", "full size, on Windows (inductor's CPU code needs MSVC's cl set up)"
    compiler = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    if shutil.which(compiler):
        return "inductor", f"full size, with {shutil.which(compiler)} to build the generated code"
    return "aot_eager", f"full size, but no {compiler} to build inductor's code: AOTAutograd's tracing only"


@dataclass(frozen=True)
class CompiledRun:
    """One recording of a :class:`CompiledStep`: each step's time, each batch's real samples, what
    Dynamo compiled, and the loader's settings."""

    steps_s: tuple[float, ...]  #: each batch's step (the loop's green segment), in order
    rows: tuple[int, ...]  #: each batch's real samples (padding excluded)
    epochs_of: tuple[int, ...]  #: each batch's epoch
    compiles: tuple[CompileEvent, ...]
    trained: dict[int, int]  #: sample id -> how many times it was trained on
    length: int
    batch_size: int
    drop_last: bool
    padded: bool  #: collate_fn=PadToBatch(...)
    dynamic: bool  #: the batch dimension marked dynamic
    backend: str
    epochs: int

    @property
    def recompiles(self) -> list[CompileEvent]:
        return [e for e in self.compiles if e.recompile]

    def ragged(self) -> int | None:
        """The first batch whose tensors have another shape than the first batch's (None: none)."""
        shapes = [self.batch_size if self.padded else n for n in self.rows]
        return next((i for i, n in enumerate(shapes) if n != shapes[0]), None)

    def typical_step_s(self) -> float:
        """The median step after the first (which compiles)."""
        later = sorted(self.steps_s[1:]) or [self.steps_s[0]]
        return later[len(later) // 2]

    def epoch_end(self, epoch: int = 0) -> int:
        """The last batch of ``epoch`` (where the ragged batch comes when there is one)."""
        return max(i for i, e in enumerate(self.epochs_of) if e == epoch)

    def trained_per_epoch(self) -> float:
        return sum(self.trained.values()) / self.epochs

    def describe(self) -> str:
        reasons = "; ".join(e.recompile_reason.splitlines()[0] for e in self.recompiles)
        return (f"{len(self.compiles)} compile(s), {len(self.recompiles)} recompile(s)"
                + (f" ({reasons})" if reasons else "")
                + f"; median step {self.typical_step_s() * 1e3:.1f} ms; "
                f"{self.trained_per_epoch():.0f} of {self.length} samples trained per epoch")


def compiled_run(loader: Any, tl: Timeline, step: CompiledStep) -> CompiledRun:
    """What a recording (:func:`helpers.record`) of ``loader`` with ``step`` measured."""
    return CompiledRun(
        tuple(b.step_s for b in tl.batches), tuple(len(b.indices or ()) for b in tl.batches),
        tuple(b.epoch for b in tl.batches), tuple(step.compiles), dict(step.trained),
        len(loader.dataset), loader.batch_size, bool(loader.drop_last),
        isinstance(loader.collate_fn, PadToBatch), step.dynamic_batch, step.backend, len(tl.epochs))
