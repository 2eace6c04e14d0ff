"""Injection formats A/B/C: the exact text a set of recalled memories is injected as, and its token cost.

Owns ``render`` (the string a prompt would get) and ``TokenTable`` (per-memory and per-session token
costs, so the sweep prices hundreds of thousands of selections without re-tokenising).

* **A** plain lines (the default, ``bench.tokens.format_memories``): ``role: text`` joined by ``\\n``.
* **B** JSON: ``[{"role": ..., "content": ..., "date": "YYYY-MM-DD"}, ...]`` written with
  ``json.dumps(..., ensure_ascii=False)``, objects joined by ``", "`` (``date`` omitted when the
  memory has no timestamp).
* **C** labelled sections with session date anchors (the code-agent article's format)::

      ## Relevant Past Context
      <blank line>
      From session on 8 May 2023:
      [turn] user: ...
      [turn] assistant: ...

  One section per session, sessions in time order, turns in conversation order inside a section
  (so C re-orders a selection; A and B keep its order). A session without a timestamp is labelled
  ``From session <n>:`` (1-based ordinal).

Nothing selected = nothing injected = 0 tokens in every format.

Token accounting: ``render`` is the truth; ``TokenTable.cost`` adds the token counts of the pieces
``render`` concatenates, each counted on its own (A: lines, with ``separator_tokens`` per newline as
in ``bench.sweep``; B: ``[`` + ``]`` + objects + ``", "`` separators; C: header + one anchor per
session + one ``[turn]`` line per memory). BPE can merge across a piece boundary; the fixed and separator costs
(B's brackets and ``", "``, C's anchors) are therefore measured in context on real pieces, and the sum
is within a few tokens of the exact count (tests pin the gap on LoCoMo).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from bench.types import Turn

FORMATS = ("A", "B", "C")
C_HEADER = "## Relevant Past Context\n"
B_OPEN, B_CLOSE, B_SEP = "[", "]", ", "


def check_formats(formats: Iterable[str]) -> tuple[str, ...]:
    out = tuple(formats)
    bad = [f for f in out if f not in FORMATS]
    if bad or not out:
        raise ValueError(f"formats: unknown or empty {out!r}; choose from {', '.join(FORMATS)}")
    return out


def _date(ts: float | None) -> str | None:
    if ts is None:
        return None
    d = datetime.fromtimestamp(ts, tz=timezone.utc)
    return f"{d.day} {d.strftime('%B')} {d.year}"


def line_a(t: Turn) -> str:
    return f"{t.role}: {t.text}"


def object_b(t: Turn) -> str:
    obj = {"role": t.role, "content": t.text}
    if t.timestamp is not None:
        obj["date"] = datetime.fromtimestamp(t.timestamp, tz=timezone.utc).strftime("%Y-%m-%d")
    return json.dumps(obj, ensure_ascii=False)


def line_c(t: Turn) -> str:
    return f"[turn] {t.role}: {t.text}\n"


def anchor_c(t: Turn) -> str:
    """The section anchor of the session ``t`` belongs to (with its leading blank line)."""
    d = _date(t.timestamp)
    return f"\nFrom session on {d}:\n" if d else f"\nFrom session {t.session + 1}:\n"


def session_key(t: Turn) -> str:
    return f"{t.conversation_id}|s{t.session}"


def _sections(turns: Sequence[Turn]) -> list[list[Turn]]:
    groups: dict[str, list[Turn]] = {}
    for t in turns:
        groups.setdefault(session_key(t), []).append(t)
    ordered = sorted(groups.values(), key=lambda g: (g[0].conversation_id, min(x.timestamp if x.timestamp is not None else float("inf") for x in g), g[0].session))
    return [sorted(g, key=lambda x: x.position) for g in ordered]


def render(fmt: str, turns: Sequence[Turn]) -> str:
    """The exact text injected for ``turns`` (a selection, in selection order) in format ``fmt``."""
    check_formats([fmt])
    if not turns:
        return ""
    if fmt == "A":
        return "\n".join(line_a(t) for t in turns)
    if fmt == "B":
        return B_OPEN + B_SEP.join(object_b(t) for t in turns) + B_CLOSE
    return C_HEADER + "".join(anchor_c(g[0]) + "".join(line_c(t) for t in g) for g in _sections(turns))


@dataclass(frozen=True)
class TokenTable:
    """Token costs of every memory in every format, keyed by memory key (``Turn.key``)."""

    memory: Mapping[str, Mapping[str, int]]  # format -> memory key -> tokens of its piece
    session_of: Mapping[str, str]  # memory key -> session key
    anchor: Mapping[str, int]  # session key -> tokens of its C anchor
    fixed: Mapping[str, int]  # format -> tokens paid once per non-empty selection
    per_gap: Mapping[str, int]  # format -> tokens per separator between two memories

    def cost(self, fmt: str, keys: Sequence[str]) -> int:
        """Token cost of injecting the memories ``keys`` (distinct) in format ``fmt``."""
        if not keys:
            return 0
        try:
            table = self.memory[fmt]
        except KeyError:
            raise ValueError(f"TokenTable: format {fmt!r} was not built (have {', '.join(self.memory)})") from None
        n = sum(map(table.__getitem__, keys)) + self.fixed[fmt] + self.per_gap[fmt] * (len(keys) - 1)
        if fmt == "C":
            n += sum(map(self.anchor.__getitem__, set(map(self.session_of.__getitem__, keys))))
        return n


def token_table(turns: Sequence[Turn], count_many: Callable[[list[str]], list[int]], formats: Sequence[str] = FORMATS,
                *, separator_tokens: int = 0) -> TokenTable:
    """Count every piece once. ``count_many`` maps texts to token counts (e.g. ``bench.tokens.count_tokens_many``)."""
    formats = check_formats(formats)
    memory: dict[str, dict[str, int]] = {}
    fixed: dict[str, int] = {}
    per_gap: dict[str, int] = {}
    piece = {"A": line_a, "B": object_b, "C": line_c}
    for f in formats:
        memory[f] = dict(zip((t.key for t in turns), count_many([piece[f](t) for t in turns])))
    # Boundary costs are measured in context, so BPE merges across a boundary ('"}, {"', "\n\n")
    # are priced once: B's brackets and separator on a real object, C's anchors after a newline.
    o = object_b(turns[0]) if turns else "{}"
    n_o, n_oo, n_boxed, n_header = count_many([o, o + B_SEP + o, B_OPEN + o + B_CLOSE, C_HEADER])
    fixed.update(A=0, B=n_boxed - n_o, C=n_header)
    per_gap.update(A=separator_tokens, B=n_oo - 2 * n_o, C=0)
    firsts: dict[str, Turn] = {}
    for t in turns:
        firsts.setdefault(session_key(t), t)
    anchors: dict[str, int] = {}
    if "C" in formats and firsts:
        firsts_l = list(firsts.values())
        lines = count_many([line_c(t) for t in firsts_l])
        framed = count_many([C_HEADER + anchor_c(t) + line_c(t) for t in firsts_l])
        anchors = {k: f - n_header - n for k, f, n in zip(firsts, framed, lines)}
    return TokenTable(memory, {t.key: session_key(t) for t in turns}, anchors,
                      {f: fixed[f] for f in formats}, {f: per_gap[f] for f in formats})
