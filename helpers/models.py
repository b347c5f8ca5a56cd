"""Training steps: a modelled accelerator, and real models for when there is a GPU.

On a CPU-only machine a real model competes with the DataLoader workers for the
same cores, which hides every lesson. :class:`ModelledStep` models the accelerator
instead: it takes a set time while using no CPU, the way a GPU step frees the host.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from .system import burn_cpu


class ModelledStep:
    """A training step that lasts ``step_s`` seconds and uses no CPU (it sleeps).

    Call it with the batch; the batch is ignored. Picklable.
    """

    def __init__(self, step_s: float):
        if step_s < 0:
            raise ValueError(f"step_s must be >= 0 seconds, got {step_s}")
        self.step_s = step_s

    def __call__(self, batch: Any) -> None:
        if self.step_s > 0:
            time.sleep(self.step_s)

    def __repr__(self) -> str:
        return f"ModelledStep(step_s={self.step_s})"


class TutorialNet(nn.Module):
    """The PyTorch data-loading tutorial's model ("Data Loading Optimization").

    conv(3->32, k7, s4, p3) -> ReLU -> conv(32->64, k3, s2, p1) -> ReLU -> adaptive
    average pool to 7x7 -> 49 tokens of width 64 -> 2-layer Transformer encoder
    (4 heads, FFN 128, batch-first) -> mean over tokens -> linear to classes.
    """

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=7, stride=4, padding=3),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d((7, 7)),
        )
        layer = nn.TransformerEncoderLayer(
            d_model=64, nhead=4, dim_feedforward=128, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(64, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.features(images).flatten(2).transpose(1, 2)  # (N, 49, 64)
        return self.head(self.encoder(tokens).mean(dim=1))


class ForumMLP(nn.Sequential):
    """The forum thread's MLP ("why is my training slower with num_workers?"):
    784 -> 600 -> 300 -> 100 -> 10."""

    def __init__(self):
        super().__init__(
            nn.Linear(784, 600), nn.ReLU(),
            nn.Linear(600, 300), nn.ReLU(),
            nn.Linear(300, 100), nn.ReLU(),
            nn.Linear(100, 10),
        )


class TrainStep:
    """A real SGD step on ``(inputs, labels)`` batches: copy to the device, forward,
    cross-entropy, backward, update.

    ``sync_every_step=True`` reads ``loss.item()`` each step, as the tutorial does;
    that forces the host to wait for the device, so the step's end is real. With
    False, losses stay on the device and :meth:`losses` reads them once.
    """

    def __init__(
        self,
        model: nn.Module,
        device: torch.device | str | None = None,
        *,
        lr: float = 0.01,
        momentum: float = 0.0,
        sync_every_step: bool = True,
    ):
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.model = model.to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=momentum)
        self.loss_fn = nn.CrossEntropyLoss()
        self.sync_every_step = sync_every_step
        self._losses: list[torch.Tensor | float] = []

    def __call__(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        inputs, labels = batch
        inputs = inputs.to(self.device, non_blocking=inputs.is_pinned())
        labels = labels.to(self.device, non_blocking=labels.is_pinned())
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(inputs), labels)
        loss.backward()
        self.optimizer.step()
        if self.sync_every_step:
            self._losses.append(loss.item())
        else:
            self._losses.append(loss.detach())

    def losses(self) -> list[float]:
        """Every step's loss as Python floats (one device sync at most)."""
        return [float(v) for v in self._losses]


class HostDeviceStep:
    """A step in two parts, the way a GPU step uses the host: a **host part** (``host_s`` of CPU work
    in the loop's thread, holding the GIL throughout: launching the kernels; a real step's Python
    holds it, and PyTorch releases it around each op's dispatch: the worst case for other threads) queues a
    **device part** (``device_s`` that runs without the host, after the device's earlier work). A
    sync — reading ``loss.item()``, every ``sync_every`` steps — makes the host wait, without the
    GIL, until the device has run everything queued. With ``sync_every=1`` nothing the host does
    next overlaps the device; with a larger one the host launches step s+1 (and receives its batch)
    while the device runs step s. ``sync_every=0``: never sync (the device's queue is unbounded). Picklable.
    """

    def __init__(self, host_s: float, device_s: float, sync_every: int = 1):
        if host_s < 0 or device_s < 0:
            raise ValueError(f"host_s and device_s must be >= 0 seconds, got {host_s}, {device_s}")
        if not isinstance(sync_every, int) or sync_every < 0:
            raise ValueError(f"sync_every must be an integer >= 0, got {sync_every!r}")
        self.host_s, self.device_s, self.sync_every = host_s, device_s, sync_every
        self._device_free = 0.0  # when the device will have run everything queued (perf_counter)
        self._steps = 0

    def __call__(self, batch: Any) -> None:
        burn_cpu(self.host_s)  # the launches
        now = time.perf_counter()
        self._device_free = max(self._device_free, now) + self.device_s
        self._steps += 1
        if self.sync_every and self._steps % self.sync_every == 0:
            self.sync()

    def sync(self) -> None:
        """Wait without the GIL until the device has run every queued step: ``loss.item()`` (this one
        sleeps; a CUDA sync by default spins on a core while it waits)."""
        left = self._device_free - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def __repr__(self) -> str:
        return f"HostDeviceStep(host_s={self.host_s}, device_s={self.device_s}, sync_every={self.sync_every})"
