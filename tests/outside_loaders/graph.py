"""Node classification on a citation graph with two-hop neighbour sampling."""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "graph"
CAUSE = ("build_adjacency turns the 8,000-edge list into neighbour lists with a Python loop inside every "
         "__getitem__, although the graph never changes.")
CAUSE_FUNCTION = "build_adjacency"
CAUSE_CALL = "a Python loop"
FIX = "Build the neighbour lists once in the Dataset's __init__ and sample from them in __getitem__."
STEP_MS = 10.0
BATCH_SIZE = 16
NUM_WORKERS = 2

NAME = "graph"
N_NODES = 6400
N_EDGES = 8_000
N_FEATURES = 64
N_CLASSES = 7
FANOUT = (10, 5)


def _write_graph(folder: str) -> None:
    rng = np.random.default_rng(10)
    labels = rng.integers(0, N_CLASSES, N_NODES)
    src = rng.integers(0, N_NODES, N_EDGES)
    same = rng.random(N_EDGES) < 0.7
    by_class = [np.flatnonzero(labels == c) for c in range(N_CLASSES)]
    dst = np.where(same, [by_class[labels[s]][rng.integers(len(by_class[labels[s]]))] for s in src],
                   rng.integers(0, N_NODES, N_EDGES))
    centres = rng.normal(0, 1, (N_CLASSES, N_FEATURES))
    features = (centres[labels] + rng.normal(0, 2, (N_NODES, N_FEATURES))).astype(np.float32)
    np.save(os.path.join(folder, "edges.npy"), np.stack([src, dst]).astype(np.int64))
    np.save(os.path.join(folder, "features.npy"), features)
    np.save(os.path.join(folder, "labels.npy"), labels)


def graph_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(edges (2, E), features (N, F), labels (N,)), created on first use."""
    folder = _files.ensure(NAME, _write_graph)
    return tuple(np.load(os.path.join(folder, f"{n}.npy")) for n in ("edges", "features", "labels"))


def build_adjacency(edges: np.ndarray) -> dict[int, list[int]]:
    """Undirected neighbour lists from an edge list."""
    neighbours: dict[int, list[int]] = defaultdict(list)
    for s, d in zip(edges[0].tolist(), edges[1].tolist(), strict=True):
        neighbours[s].append(d)
        neighbours[d].append(s)
    return neighbours


def sample_neighbours(neighbours: dict[int, list[int]], nodes: list[int], fanout: int,
                      rng: np.random.Generator) -> list[int]:
    picked = []
    for node in nodes:
        options = neighbours.get(node, [])
        if options:
            picked.extend(options[j] for j in rng.integers(0, len(options), fanout).tolist())
    return picked


class NeighbourhoodDataset(Dataset):
    """(features of the seed node and its sampled 2-hop neighbourhood, padded; label) per node."""

    def __init__(self, edges: np.ndarray, features: np.ndarray, labels: np.ndarray):
        self.edges = edges
        self.features = torch.from_numpy(features)
        self.labels = labels
        self.size = 1 + FANOUT[0] + FANOUT[0] * FANOUT[1]

    def __len__(self) -> int:
        return len(self.labels)

    def adjacency(self) -> dict[int, list[int]]:
        return build_adjacency(self.edges)

    def __getitem__(self, idx: int):
        rng = np.random.default_rng(idx)
        neighbours = self.adjacency()
        hop1 = sample_neighbours(neighbours, [idx], FANOUT[0], rng)
        hop2 = sample_neighbours(neighbours, hop1, FANOUT[1], rng)
        nodes = torch.tensor([idx, *hop1, *hop2])
        x = torch.zeros(self.size, self.features.shape[1])
        x[: len(nodes)] = self.features[nodes]
        return x, len(nodes), int(self.labels[idx])


class PrebuiltNeighbourhoodDataset(NeighbourhoodDataset):
    """The same neighbourhoods, sampled from lists built once."""

    def __init__(self, edges: np.ndarray, features: np.ndarray, labels: np.ndarray):
        super().__init__(edges, features, labels)
        self._neighbours = build_adjacency(edges)

    def adjacency(self) -> dict[int, list[int]]:
        return self._neighbours


def make_loader() -> DataLoader:
    return DataLoader(NeighbourhoodDataset(*graph_arrays()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(PrebuiltNeighbourhoodDataset(*graph_arrays()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
