"""Sentence classification: raw text lines tokenised into WordPiece ids."""

from __future__ import annotations

import os
import re

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "text"
CAUSE = ("A WordPiece tokenizer is constructed inside every __getitem__, so the 30,000-line vocabulary "
         "file is read and turned into a dict for each sentence.")
CAUSE_FUNCTION = "WordPieceTokenizer.__init__"
CAUSE_CALL = "a dict comprehension"
FIX = "Construct the tokenizer once in the Dataset's __init__ and reuse it for every sentence."
STEP_MS = 15.0
BATCH_SIZE = 16
NUM_WORKERS = 0

NAME = "text"
VOCAB_SIZE = 30_000
N_LINES = 3200
MAX_LEN = 128
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "der", "ing", "tion", "al",
             "er", "on", "st", "re", "an", "th", "ou", "ble", "ment", "ish"]


def _words(rng: np.random.Generator, n: int) -> list[str]:
    lengths = rng.integers(1, 5, n)
    parts = rng.integers(0, len(SYLLABLES), (n, 4))
    pairs = zip(parts.tolist(), lengths.tolist(), strict=True)
    return ["".join(SYLLABLES[j] for j in row[:k]) for row, k in pairs]


def _write_corpus(folder: str) -> None:
    rng = np.random.default_rng(1)
    words = list(dict.fromkeys(_words(rng, VOCAB_SIZE * 2)))[: VOCAB_SIZE * 3 // 4]
    pieces = list(dict.fromkeys("##" + w for w in _words(rng, VOCAB_SIZE * 2)))
    vocab = SPECIALS + [str(d) for d in range(10)] + words
    vocab += pieces[: VOCAB_SIZE - len(vocab)]
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    pool = words + _words(rng, 5000)
    with open(os.path.join(folder, "train.tsv"), "w") as f:
        for i in range(N_LINES):
            picks = rng.integers(0, len(pool), int(rng.integers(20, 90)))
            sentence = " ".join(pool[j] for j in picks.tolist())
            f.write(f"{i % 4}\t{sentence.capitalize()}.\n")


def corpus_files() -> tuple[str, str]:
    """(vocab.txt, train.tsv), created on first use."""
    folder = _files.ensure(NAME, _write_corpus)
    return os.path.join(folder, "vocab.txt"), os.path.join(folder, "train.tsv")


class WordPieceTokenizer:
    """Greedy longest-match-first WordPiece over a vocabulary file, one token per line."""

    def __init__(self, vocab_path: str, max_chars_per_word: int = 100):
        with open(vocab_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        self.vocab = {token: i for i, token in enumerate(lines) if token}
        self.unk = self.vocab["[UNK]"]
        self.max_chars_per_word = max_chars_per_word
        self.split = re.compile(r"\w+|[^\w\s]")

    def tokenize_word(self, word: str) -> list[int]:
        if len(word) > self.max_chars_per_word:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.unk]
            start = end
        return ids

    def encode(self, text: str, max_len: int) -> list[int]:
        ids = [self.vocab["[CLS]"]]
        for word in self.split.findall(text.lower()):
            ids.extend(self.tokenize_word(word))
        return ids[: max_len - 1] + [self.vocab["[SEP]"]]


class SentenceDataset(Dataset):
    """(token ids padded to MAX_LEN, attention mask, label) per line of a TSV file."""

    def __init__(self, vocab_path: str, tsv_path: str):
        self.vocab_path = vocab_path
        with open(tsv_path, encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t", 1) for line in f]
        self.labels = [int(label) for label, _ in rows]
        self.texts = [text for _, text in rows]

    def __len__(self) -> int:
        return len(self.texts)

    def tokenizer(self) -> WordPieceTokenizer:
        return WordPieceTokenizer(self.vocab_path)

    def __getitem__(self, idx: int):
        ids = self.tokenizer().encode(self.texts[idx], MAX_LEN)
        padded = torch.zeros(MAX_LEN, dtype=torch.long)
        padded[: len(ids)] = torch.tensor(ids)
        mask = torch.zeros(MAX_LEN, dtype=torch.bool)
        mask[: len(ids)] = True
        return padded, mask, self.labels[idx]


class SharedTokenizerSentenceDataset(SentenceDataset):
    """The same sentences, with one tokenizer built up front."""

    def __init__(self, vocab_path: str, tsv_path: str):
        super().__init__(vocab_path, tsv_path)
        self._tokenizer = WordPieceTokenizer(vocab_path)

    def tokenizer(self) -> WordPieceTokenizer:
        return self._tokenizer


def make_loader() -> DataLoader:
    return DataLoader(SentenceDataset(*corpus_files()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(SharedTokenizerSentenceDataset(*corpus_files()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
