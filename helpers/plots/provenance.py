"""The reference figures' proof of origin.

Each PNG in ``images/`` that a script draws carries, in its metadata (PNG text chunks), the script
and figure group that drew it and a digest of that group's code together with the palette
(:func:`digest`). ``scripts/make_figures.py --check`` (and ``make_gpu_figures.py --check``)
compare those with the scripts as they are now and name every figure drawn by other code, with
another palette, or before figures carried their origin. The check reads PNG metadata only
(Pillow, matplotlib's own dependency): it runs nothing.

The digest covers the group's source text (its parameters, titles and sizes), not the plotting
functions it calls: changing how a plot draws does not make the reference figures stale, changing
what a script measures or the palette does.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable
from pathlib import Path

from matplotlib.figure import Figure

from .. import palette
from .style import fit_text

#: PNG text keywords: "Source" and "Description" are PNG's registered ones.
SOURCE, DESCRIPTION, DIGEST = "Source", "Description", "DLLab-Digest"


def _source_text(function: Callable) -> str:
    """A function's source without blank lines, comment lines or trailing spaces: the same text
    on every Python version (unlike ``ast.dump`` or the tokenizer, which change between them)."""
    lines = (line.rstrip() for line in inspect.getsource(function).splitlines())
    return "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith("#"))


def digest(*functions: Callable, extra: str = "") -> str:
    """16 hex digits naming the code of ``functions``, :func:`helpers.palette.fingerprint` and
    ``extra``: another value means another figure."""
    h = hashlib.sha256()
    for function in functions:
        h.update(_source_text(function).encode())
    h.update(palette.fingerprint().encode())
    h.update(extra.encode())
    return h.hexdigest()[:16]


def fits_slide(width: float, height: float) -> bool:
    """Whether a picture ``width`` × ``height`` (pixels or inches) shown full width fits a 16:9
    slide (a pixel of rounding allowed)."""
    return height <= width / palette.SLIDE_ASPECT + 1


def save(figure: Figure, path: str | Path, *, source: str, digest: str, description: str,
         dpi: int = palette.SLIDE_DPI) -> Path:
    """Save a reference figure with its origin in its metadata: ``source`` (the script and group
    that drew it), ``digest`` (:func:`digest` of that group) and ``description`` (what, where,
    on what machine). Refuses a figure taller than a 16:9 slide; raises small text to the
    palette's floor first."""
    path = Path(path)
    width, height = figure.get_size_inches()
    if not fits_slide(width * dpi, height * dpi):
        raise ValueError(f"{path.name}: {width:.2f} × {height:.2f} in is taller than a 16:9 slide; "
                         f"at most {width / palette.SLIDE_ASPECT:.2f} in tall at this width")
    fit_text(figure)
    figure.savefig(path, dpi=dpi, metadata={SOURCE: source, DESCRIPTION: description, DIGEST: digest})
    return path


def read(path: str | Path) -> dict[str, str]:
    """A PNG's text metadata (``{}`` when it has none)."""
    from PIL import Image

    with Image.open(path) as image:
        return dict(getattr(image, "text", {}) or {})


def stale(folder: str | Path, expected: dict[str, tuple[str, str]]) -> list[str]:
    """For each figure name → (source, digest) expected in ``folder``: a line for each that is
    missing, carries no origin, or was drawn by other code or with another palette. Empty when
    every figure is current."""
    found = []
    for name, (source, want) in expected.items():
        path = Path(folder) / name
        if not path.exists():
            found.append(f"{name}: missing (draw it: {source})")
            continue
        meta = read(path)
        have = meta.get(DIGEST)
        if have is None:
            found.append(f"{name}: carries no origin, drawn before figures recorded it (redraw: {source})")
        elif meta.get(SOURCE) != source or have != want:
            found.append(f"{name}: drawn by {meta.get(SOURCE)!r} at digest {have}, the script is now "
                         f"{source!r} at {want} (redraw it)")
    return found


def unclaimed(folder: str | Path, claimed: Iterable[str]) -> list[str]:
    """The PNGs in ``folder`` (not its subfolders) that no script claims to draw."""
    return sorted(p.name for p in Path(folder).glob("*.png") if p.name not in set(claimed))
