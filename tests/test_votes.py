"""Each vote is a real question: nothing a learner reads before it names its answer or hands over the
rule that computes it.

A vote is a ``helpers.Prediction("<key>", ...)`` cell, or a markdown paragraph that opens with
``**Predict:**`` or ``**Predict**`` (key ``<notebook>#<k>``, the k-th such paragraph of the notebook,
from 1). What a learner has read before it depends on where the notebook sits:

- on the core path (notebook 00, then ``scripts/notebook_table.py``'s ``CORE`` in order): README.md,
  the glossary, every notebook before it on the path, and its own notebook above the vote;
- 00b, the shortcut for an engineer with a loader of their own: README.md, the glossary, 00, and its
  own notebook above the vote;
- an elective: all of that, the whole core path, 00b and the overview deck (a recap for after the
  core path), and its own notebook above the vote.

"Above the vote" is every cell before the vote's cell, code included (what a cell prints is read too),
and for a ``**Predict:**`` paragraph its own cell up to the paragraph. A figure counts by its file name:
one that answers a vote (``FIGURE_ANSWERS``) must not be shown before it, in README.md or in a cell.
"""

from __future__ import annotations

import json
import re
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import notebook_table  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
PATH = ["00", *notebook_table.CORE]
SHORTCUT = "00b"
WIDGET = re.compile(r"helpers\.Prediction\(\s*\"(\w+)\"")
PREDICT = re.compile(r"\*\*Predict(?::\*\*|\*\*)")
FIGURE = re.compile(r"([\w-]+\.png)")

#: Each vote's answer, and the rule that computes it, in the words a text would give them away with.
GIVEAWAYS: dict[str, list[str]] = {
    # 00 · the two questions in words
    "00#1": ["in total, however many", "as many as the quota", "about 1 cpu however many"],
    # 00b · the shortcut
    "wait_share_after_advice": ["the wait share drops", "m is a sliver", "what remains is the step",
                                "no worker count removes"],
    # the core path
    "per_batch_2_workers": ["0.25 s / 0.75 s", "0.25 and 0.75", "0.25 s and 0.75 s", "intervals alternate",
                            "max(n/x", "max(n / x", "every n/x", "every n / x", "x = ⌈n"],
    "handover_ms": ["fixed cost per tensor", "a handle to shared memory", "a handle to it", "not as bytes",
                    "never copied", "a sliver", "hand-over is milliseconds", "about a millisecond"],
    "runahead_prefetch_4": ["counts batches per worker", "batches *per worker*", "batches each in flight",
                            "prefetch_factor × num_workers", "num_workers × prefetch_factor",
                            "prefetch_factor + 2"],
    "03#2": ["waits nearly vanish", "depth absorbs", "absorbs slow", "absorb stragglers", "absorbs them",
             "depth pays", "depth buys", "depth matters when"],
    "persistent_first_batch": ["does not prefetch across", "still costs one batch", "still waits one batch",
                               "first batch of every epoch still"],
    "05#2": ["far more of its memory is its own", "its own memory is small",
             "pages it shares with the parent"],
    "batches_pinned": ["no pin thread", "nothing is pinned", "none are pinned", "pins nothing",
                       "nothing but warn", "on a cpu-only machine it does nothing"],
    "per_batch_prefetch_thread": ["the step alone", "the slower of the two",
                                  "without using the cpu or the gil", "runs under the step",
                                  "the transform of batch s+1 runs"],
    "followed_vs_predicted": ["each within its noise", "predicted 21.3", "66.8 → 22.3"],
    "costliest_line": ["sorts all 8,000", "the dictionary is the same", "numbered anew", "vocabulary, sorted",
                       "that line touches 8,000"],
    # the electives
    "04#2": ["compete for the same cores", "takes cpu from the step", "the step slows"],
    "08#2": ["the gain of workers shrinks", "can turn into a loss", "saves at most that"],
    "11#2": ["every later stage gains little", "capped near"],
    "12#2": ["the same two processes serve both epochs", "copy the list all over"],
    "13#3": ["where it waited", "took longer, the split"],
    "17#2": ["all ranks step at the straggler's rate", "every rank steps several times faster"],
    "18#2": ["arrived `workers` times", "everything in every worker"],
    "fastest_data_path": ["the winner", "beats any number of workers", "batch sampler, 0 workers",
                          "one index per batch beats"],
    "remote_batched_speedup": ["about 64×", "64 round trips"],
    "p99_in_order_ratio": ["many times lower"],
    "shm_batches_before_failure": ["batches reach the loop before", "four batches reach",
                                   "the fifth batch fails"],
    "biggest_stage_gain": ["every stage after workers gains little", "workers gain most"],
    "extra_uss_lists": ["the whole list", "copies nearly every page", "copied into every forked worker",
                        "page by page into every worker", "about the whole list"],
    "remote_first_byte": ["orders of magnitude"],
    "remote_serial_rate": ["in flight ÷", "requests in flight divided"],
    "jpeg_threads": ["threads help", "two threads decode on two cores", "release it while they work",
                     "come close to two processes", "clearly more than one thread",
                     "releases the gil while an operator"],
    "restart_repeats": ["checkpoint × batch", "160 samples"],
    "dist_padding": ["⌈n / ranks⌉", "as many as there are ranks"],
    "distinct_draws": ["one worker's share", "copied into every worker", "copied into each worker",
                       "reseeds only"],
    "recompiles": [],
    "m_many_tensors": ["several times more as many tensors", "costs several times more"],
    "cell_dataset_seconds": ["every 5 s", "status check", "mp_status_check_interval", "raises at once"],
}

#: Figures that answer a vote: shown before it, they give it away.
FIGURE_ANSWERS: dict[str, list[str]] = {
    "blog_intervals.png": ["per_batch_2_workers"],
    "blog_timeline_0_vs_2_workers.png": ["per_batch_2_workers"],
    "blog_timelines_0_to_4_workers.png": ["per_batch_2_workers"],
    "prefetch_slow_samples.png": ["03#2"],
    "persistent_workers_spawn.png": ["persistent_first_batch"],
    "host_prefetch_thread.png": ["per_batch_prefetch_thread"],
    "chain_step_ratio.png": ["biggest_stage_gain"],
    "capstone_gpu.png": ["biggest_stage_gain"],
    "copy_on_read_list.png": ["extra_uss_lists"],
    "remote_first_byte.png": ["remote_first_byte"],
    "remote_requests.png": ["remote_serial_rate"],
    "image_pipeline.png": ["jpeg_workers"],
    "resume.png": ["restart_repeats"],
    "diagnose_mysteries.png": ["followed_vs_predicted"],
}


def notebook(prefix: str) -> Path:
    found = [p for p in NOTEBOOKS.glob(f"{prefix}_*.ipynb")] or [NOTEBOOKS / f"{prefix}.ipynb"]
    return found[0]


@cache
def cells(prefix: str) -> tuple[tuple[str, str], ...]:
    nb = json.loads(notebook(prefix).read_text())
    return tuple((c["cell_type"], "".join(c["source"])) for c in nb["cells"])


def votes(prefix: str) -> list[tuple[str, int, int]]:
    """(key, cell index, characters of that cell read before it) of every vote in a notebook. A
    ``**Predict:**`` paragraph whose section goes on to a ``Prediction`` cell asks that widget's question:
    it is that vote, read from the paragraph on."""
    found, k, all_cells = [], 0, cells(prefix)
    for i, (kind, source) in enumerate(all_cells):
        if kind == "markdown":
            for match in PREDICT.finditer(source):
                k += 1
                found.append((widget_after(all_cells, i) or f"{prefix}#{k}", i, match.start()))
        else:
            found += [(key, i, 0) for key in WIDGET.findall(source)]
    return found


def widget_after(all_cells: tuple[tuple[str, str], ...], index: int) -> str | None:
    """The key of the first Prediction in the section that cell ``index`` belongs to, after it."""
    for kind, source in all_cells[index + 1:]:
        if kind == "markdown" and source.startswith("#"):
            return None
        if keys := WIDGET.findall(source):
            return keys[0]
    return None


def prefixes() -> list[str]:
    return sorted(p.name.split("_")[0] for p in NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb"))


def read_first(prefix: str) -> list[str]:
    """What a learner has read before they open notebook ``prefix`` (its own cells aside)."""
    texts = [(ROOT / "README.md").read_text(), (ROOT / "docs" / "glossary.md").read_text()]
    if prefix in PATH:
        before = PATH[:PATH.index(prefix)]
    elif prefix == SHORTCUT:
        before = ["00"]
    else:
        before = [*PATH, SHORTCUT, "overview"]
    for other in before:
        texts += [source for _, source in cells(other)]
    return texts


def giveaways(texts: list[str], key: str) -> list[str]:
    """The phrases of ``GIVEAWAYS[key]`` and the figures of ``FIGURE_ANSWERS`` found in ``texts``."""
    flat = " ".join(" ".join(texts).split()).lower()
    found = [f"{phrase!r}" for phrase in GIVEAWAYS.get(key, []) if phrase.lower() in flat]
    shown = set(FIGURE.findall(" ".join(texts)))
    return found + [f"the figure {name}" for name, keys in FIGURE_ANSWERS.items()
                    if key in keys and name in shown]


def before_vote(prefix: str, index: int, chars: int) -> list[str]:
    own = [source for _, source in cells(prefix)[:index]] + [cells(prefix)[index][1][:chars]]
    return read_first(prefix) + own


def test_the_finder_finds_an_answer_read_before_its_vote():
    texts = ["Expect *about 5 %*: what remains is the step,\n and m is a sliver of it."]
    assert giveaways(texts, "wait_share_after_advice") == ["'m is a sliver'", "'what remains is the step'"]
    assert giveaways(["![a figure](../images/blog_intervals.png)"], "per_batch_2_workers") == [
        "the figure blog_intervals.png"]
    assert giveaways(["nothing of the kind"], "wait_share_after_advice") == []


def test_a_vote_in_words_is_found_and_read_up_to_its_paragraph(monkeypatch):
    fake = (("markdown", "Intro: imports torch again.\n\n**Predict:** which starts soonest?"),
            ("code", 'guess = helpers.Prediction("handover_ms", "q", {"a": 1})'),
            ("markdown", "## Next\n\n**Predict:** in words only"))
    monkeypatch.setitem(globals(), "cells", lambda prefix: fake)
    assert votes("99") == [("handover_ms", 0, 29), ("handover_ms", 1, 0), ("99#2", 2, 9)]
    assert cells("99")[0][1][:29].endswith("torch again.\n\n")


def test_every_vote_names_its_giveaways():
    """A new vote declares the words that would give it away, so the test below can look for them."""
    missing = [f"{p}: {key}" for p in [*prefixes()] for key, _, _ in votes(p) if key not in GIVEAWAYS]
    assert missing == [], "add these votes to GIVEAWAYS:\n" + "\n".join(missing)


@pytest.mark.parametrize("prefix", prefixes())
def test_no_vote_is_answered_before_it_is_asked(prefix):
    found = [f"{key} (cell {index}): {', '.join(hits)}" for key, index, chars in votes(prefix)
             if (hits := giveaways(before_vote(prefix, index, chars), key))]
    assert found == [], f"{notebook(prefix).name}: answered before it is asked:\n" + "\n".join(found)
