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
