"""Sentence lengths in the notebooks' markdown, as a reader meets them.

A sentence is counted outside ``<details>`` blocks (how a rule is judged folds away there), code
blocks, tables and headings; a link counts by its text, inline code as one word. A list item or a
paragraph ends a sentence even without a full stop.

``python scripts/prose.py`` prints each notebook's share of sentences over ``LONG`` words and every
sentence over ``LONG`` (``--over N`` sets the bound); the test in ``tests/test_prose.py`` holds the lab
to at most ``MAX_LONG_SHARE`` of sentences over ``LONG`` words and none over ``MAX_WORDS``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: A sentence over this many words is long; at most MAX_LONG_SHARE of them may be.
LONG = 40
MAX_LONG_SHARE = 0.02
#: No sentence may run over this many words.
MAX_WORDS = 60

_ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "cf.", "approx.", "No.", "Fig.")


def reader_text(markdown: str) -> str:
    """The prose of a markdown cell: no details blocks, code, tables, headings, images or HTML tags."""
    text = re.sub(r"<details>.*?</details>", "\n\n", markdown, flags=re.S | re.I)
    text = re.sub(r"```.*?```", "\n\n", text, flags=re.S)
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)          # images
    text = re.sub(r"<img[^>]*>", " ", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)        # a link counts by its text
    text = re.sub(r"`[^`]*`", "CODE", text)                     # inline code: one word
    text = re.sub(r"<[^>]+>", " ", text)
    kept = [line for line in text.splitlines()
            if not line.lstrip().startswith(("|", "#"))]
    return "\n".join(kept)


def sentences(markdown: str) -> list[str]:
    """The sentences of a markdown cell, as a reader meets them."""
    out = []
    # a blank line or a list item starts a new unit; lines within a paragraph join
    units = re.split(r"\n\s*\n|\n(?=\s*(?:[-*+]|\d+\.)\s)", reader_text(markdown))
    for unit in units:
        unit = " ".join(unit.split())
        for abbreviation in _ABBREVIATIONS:
            unit = unit.replace(abbreviation, abbreviation.replace(".", "\u2024"))
        for sentence in re.split(r"(?<=[.!?])[*_)\"”]*\s+(?=[-*_(\"“`A-Z0-9])", unit):
            if len(words(sentence)) > 0:
                out.append(sentence.replace("\u2024", "."))
    return out


def words(sentence: str) -> list[str]:
    return [w for w in sentence.split() if re.search(r"\w", w)]


def notebook_sentences(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return [s for c in cells if c["cell_type"] == "markdown" for s in sentences("".join(c["source"]))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, default=NOTEBOOKS)
    parser.add_argument("--over", type=int, default=LONG)
    args = parser.parse_args()
    total = long = 0
    for path in args.notebooks:
        found = notebook_sentences(path)
        over = [s for s in found if len(words(s)) > args.over]
        total, long = total + len(found), long + len(over)
        print(f"{path.name}: {len(over)} of {len(found)} sentences over {args.over} words")
        for sentence in over:
            print(f"  [{len(words(sentence))}] {sentence}")
    print(f"all: {long} of {total} ({long / max(total, 1):.1%}) over {args.over} words")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
