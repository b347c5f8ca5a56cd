"""Small tables of measured numbers, shown as HTML in JupyterLab and as text elsewhere."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any


class Table:
    """Rows of values under headers. Numbers are formatted by the caller (strings), so a
    table shows exactly the precision the lesson reads."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = ""):
        widths = {len(headers)} | {len(row) for row in rows}
        if len(widths) != 1:
            raise ValueError(f"every row needs {len(headers)} values, got rows of {sorted(widths)}")
        self.headers = list(headers)
        self.rows = [[str(v) for v in row] for row in rows]
        self.caption = caption

    def __str__(self) -> str:
        columns = list(zip(self.headers, *self.rows, strict=True))
        widths = [max(len(v) for v in column) for column in columns]
        lines = [self.caption] if self.caption else []
        for row in [self.headers, *self.rows]:
            lines.append("  ".join(v.rjust(w) if i else v.ljust(w)
                                   for i, (v, w) in enumerate(zip(row, widths, strict=True))))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
                       for row in self.rows)
        caption = (f"<caption style='text-align:left'>{html.escape(self.caption)}</caption>"
                   if self.caption else "")
        return f"<table>{caption}<tr>{head}</tr>{body}</table>"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> Table:
    """A :class:`Table` (the last expression of a cell displays it)."""
    return Table(headers, rows, caption)


def progress_bar(total: int | None, label: str):
    """A tqdm progress bar (notebook widget in JupyterLab) that appears only when the work lasts
    more than 3 seconds; None when ``TQDM_DISABLE=1`` (the test targets set it: tqdm's notebook
    bar does not read that variable itself), or where tqdm is not installed (the diagnosis, run in
    a learner's own environment beside their torch, needs only torch, numpy and psutil)."""
    import os

    from ..config import parse_flag

    if parse_flag(os.environ.get("TQDM_DISABLE"), "TQDM_DISABLE"):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=label, delay=3, leave=False)


def progress(items, label: str):
    """Iterate ``items`` (a dict's items, a list...) with a progress bar (:func:`progress_bar`)."""
    items = list(items)
    bar = progress_bar(len(items), label)
    try:
        for item in items:
            yield item
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
