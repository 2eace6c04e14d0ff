"""Injection formats A/B/C: the exact text a set of recalled memories is injected as, and its token cost.

Owns ``render`` (the string a prompt would get) and ``TokenTable`` (per-memory and per-session token
costs, so the sweep prices hundreds of thousands of selections without re-tokenising).

* **A** plain lines (the default, ``bench.data.tokens.format_memories``): ``role: text`` joined by ``\\n``.
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

Token accounting: ``render`` is the truth, and ``TokenTable.cost`` equals the tiktoken count of
the rendered text exactly (tests check it on LoCoMo and on hand-made lines for cl100k_base and
o200k_base) while pricing a selection from per-memory counts. Why the pieces add up: tiktoken
cuts text into pre-tokens with a regex and merges BPE only inside a pre-token, so counts of pieces
add up wherever the regex cuts the joined text where the pieces meet. In both encodings no
pre-token runs from a newline into a letter, and a punctuation pre-token stops at whitespace. So

* A: ``count("\\n".join(lines)) = sum(count(line + "\\n") for every line but the last) + count(last line)``
  (every line starts with a letter, its role; the newline can merge only into the end of the
  line before it, e.g. ".\\n" is one cl100k token). A line that does not start with a letter
  is priced by counting the rendered text.
* B: each object starts ``{"role"``, and the punctuation pre-token at ``{`` swallows the quote, so
  ``{"`` (`` {"`` after a separator, ``[{"`` first) is a pre-token of its own; the closing ``"}``
  merges with the ``,`` or ``]`` after it and stops at the space. An object is priced as
  ``count(object + ",")`` (``+ "]"`` when last), its head ``{"`` replaced by `` {"`` / ``[{"``.
* C: every ``[turn]`` line and every anchor after its blank line start a fresh pre-token; the
  blank line before an anchor merges into the line before it (the header, or the last line of
  the previous section), priced as ``count(line + "\\n")``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from operator import itemgetter

from bench.types import Turn

FORMATS = ("A", "B", "C")
C_HEADER = "## Relevant Past Context\n"
B_OPEN, B_CLOSE, B_SEP = "[", "]", ", "
B_HEAD = '{"'  # how every B object starts (then the letters of "role")
A_SEP = "\n"


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
    """Token costs of every memory in every format, keyed by memory key (``Turn.key``).

    ``cost`` equals ``count(render(fmt, turns))`` (see the module docstring for why the pieces add up).
    """

    memory: Mapping[str, Mapping[str, int]]  # format -> memory key -> tokens of its piece on its own
    joined: Mapping[str, Mapping[str, int]]  # format -> memory key -> tokens of its piece followed by its joiner
    last: Mapping[str, Mapping[str, int]]  # format -> memory key -> tokens of its piece as the last one
    session_of: Mapping[str, str]  # memory key -> session key
    anchor: Mapping[str, int]  # memory key -> tokens of the C anchor of its session, without the leading newline
    fixed: Mapping[str, int]  # format -> tokens paid once per non-empty selection
    per_gap: Mapping[str, int]  # format -> tokens per boundary between two memories beyond their joined counts
    turns: Mapping[str, Turn] = field(default_factory=dict)  # memory key -> Turn (C section order; exact fallback)
    count_many: Callable[[list[str]], list[int]] | None = None  # the counter the table was built with
    unsafe_a: frozenset = frozenset()  # keys whose A line does not start with a letter: priced exactly
    # C, per memory key: (session key, position, timestamp or inf, tokens of its line, tokens of its session's
    # anchor when it opens the section, extra tokens when it ends a section before another, (conversation, session))
    c_info: Mapping[str, tuple] = field(default_factory=dict)

    def cost(self, fmt: str, keys: Sequence[str]) -> int:
        """Token cost of injecting the memories ``keys`` (distinct, in selection order) in format ``fmt``."""
        if not keys:
            return 0
        try:
            joined, last = self.joined[fmt], self.last[fmt]
        except KeyError:
            raise ValueError(f"TokenTable: format {fmt!r} was not built (have {', '.join(self.memory)})") from None
        if fmt == "C":
            return self._cost_c(keys)
        if fmt == "A" and self.unsafe_a and not self.unsafe_a.isdisjoint(keys[1:]):
            return self.exact(fmt, keys)
        n = len(keys)
        return self.fixed[fmt] + self.per_gap[fmt] * (n - 1) + sum(map(joined.__getitem__, keys[: n - 1])) + last[keys[n - 1]]

    def _cost_c(self, keys: Sequence[str]) -> int:
        # One section per session: its anchor and its lines. A section followed by another one ends with
        # the blank line of the next anchor, which BPE may merge into its last line (priced by ``joined``).
        info = self.c_info
        n = self.fixed["C"]
        first: dict[str, list] = {}  # session -> [lowest position, its anchor, highest position, its break cost, earliest time, order]
        for k in keys:
            s, pos, ts, tok, anchor, brk, order = info[k]
            n += tok
            g = first.get(s)
            if g is None:
                first[s] = [pos, anchor, pos, brk, ts, order]
                continue
            if pos < g[0]:
                g[0], g[1] = pos, anchor
            elif pos > g[2]:
                g[2], g[3] = pos, brk
            if ts < g[4]:
                g[4] = ts
        n += sum(g[1] for g in first.values())
        if len(first) > 1:  # every section but the last in ``_sections`` order pays its last line's break
            groups = sorted(first.values(), key=lambda g: (g[5][0], g[4], g[5][1]))
            n += sum(g[3] for g in groups[:-1])
        return n

    def exact(self, fmt: str, keys: Sequence[str]) -> int:
        """Count the rendered text itself (the slow, exact path)."""
        if self.count_many is None:
            raise ValueError("TokenTable: no counter to price this selection exactly")
        return self.count_many([render(fmt, [self.turns[k] for k in keys])])[0]


def _dedup_count(count_many: Callable[[list[str]], list[int]], texts: list[str]) -> list[int]:
    uniq = list(dict.fromkeys(texts))
    n = dict(zip(uniq, count_many(uniq)))
    return [n[t] for t in texts]


CHUNK = 16_384  # memories whose pieces are built and counted at a time: a corpus's pieces never all exist at once


def _counts(count_many: Callable[[list[str]], list[int]], turns: Sequence[Turn], piece: Callable[[Turn], str],
            *suffixes: str) -> list[list[int]]:
    """Per suffix, the token counts of ``piece(t) + suffix`` for every turn, ``CHUNK`` turns at a time (at LongMemEval_S
    size, building every turn's pieces at once left the process 1.1 GB larger after they were freed)."""
    out: list[list[int]] = [[] for _ in suffixes]
    for lo in range(0, len(turns), CHUNK):
        pieces = [piece(t) for t in turns[lo : lo + CHUNK]]
        for counts, suffix in zip(out, suffixes):
            counts += count_many([x + suffix for x in pieces] if suffix else pieces)
    return out


def token_table(turns: Sequence[Turn], count_many: Callable[[list[str]], list[int]], formats: Sequence[str] = FORMATS) -> TokenTable:
    """Count every piece once (twice where a joiner may merge into it), ``CHUNK`` memories per call of ``count_many``.

    ``count_many`` maps texts to token counts (e.g. ``bench.data.tokens.count_tokens_many``).
    """
    turns = list(turns)
    return assemble(turns, count_pieces(turns, count_many, formats), count_many)


def count_pieces(turns: Sequence[Turn], count_many: Callable[[list[str]], list[int]], formats: Sequence[str] = FORMATS) -> dict:
    """What a ``TokenTable`` is made of, as plain values: per format the token counts of every memory's pieces, aligned
    with ``turns`` (``"A.memory"``, ``"A.joined"``, ``"B.memory"``, ``"B.joined"``, ``"B.last"``, ``"C.memory"``,
    ``"C.joined"``, ``"C.anchor"``), and ``"fixed"`` / ``"per_gap"`` (format -> tokens); ``assemble`` makes the table."""
    formats = check_formats(formats)
    out: dict = {"fixed": {}, "per_gap": {}}
    if "A" in formats:
        out["A.memory"], out["A.joined"] = _counts(count_many, turns, line_a, "", A_SEP)
        out["fixed"]["A"], out["per_gap"]["A"] = 0, 0
    if "B" in formats:
        out["B.memory"], out["B.joined"], out["B.last"] = _counts(count_many, turns, object_b, "", B_SEP.rstrip(), B_CLOSE)  # '"},' ends the object's last pre-token
        n_head, n_open, n_gap = count_many([B_HEAD, B_OPEN + B_HEAD, B_SEP[-1] + B_HEAD])
        out["fixed"]["B"], out["per_gap"]["B"] = n_open - n_head, n_gap - n_head  # '[{"' and ' {"' replace the object's own '{"'
    if "C" in formats:
        out["C.memory"], out["C.joined"] = _counts(count_many, turns, line_c, "", "\n")  # with "\n": a section's last line before the next anchor
        out["C.anchor"] = _dedup_count(count_many, [anchor_c(t)[1:] for t in turns])
        out["fixed"]["C"], out["per_gap"]["C"] = count_many([C_HEADER + "\n"])[0], 0  # the header and the first anchor's blank line
    return out


def assemble(turns: Sequence[Turn], counts: Mapping, count_many: Callable[[list[str]], list[int]] | None = None) -> TokenTable:
    """The ``TokenTable`` of ``turns`` from ``count_pieces``' values (computed now, or read back from a cache)."""
    keys = [t.key for t in turns]
    formats = list(counts["fixed"])
    memory: dict[str, dict[str, int]] = {}
    joined: dict[str, dict[str, int]] = {}
    last: dict[str, dict[str, int]] = {}
    anchors: dict[str, int] = {}
    unsafe: frozenset = frozenset()
    for f in formats:
        memory[f] = dict(zip(keys, counts[f"{f}.memory"]))
        joined[f] = dict(zip(keys, counts[f"{f}.joined"]))
        last[f] = dict(zip(keys, counts[f"{f}.last"])) if f == "B" else memory[f]  # A and C: a last line costs its own count
    if "A" in formats:
        unsafe = frozenset(t.key for t in turns if not f"{t.role}:"[:1].isalpha())  # the A line's first character
    if "C" in formats:
        anchors = dict(zip(keys, counts["C.anchor"]))
    c_info = {t.key: (session_key(t), t.position, float("inf") if t.timestamp is None else t.timestamp, memory["C"][t.key],
                      anchors[t.key], joined["C"][t.key] - memory["C"][t.key], (t.conversation_id, t.session))
              for t in turns} if "C" in formats else {}
    return TokenTable(memory, joined, last, {t.key: session_key(t) for t in turns}, anchors, dict(counts["fixed"]),
                      dict(counts["per_gap"]), {t.key: t for t in turns}, count_many, unsafe, c_info)


def c_sections(table: TokenTable, keys: Sequence[str]):
    """Per memory of ``keys`` (numpy arrays): its C line tokens, the anchor tokens it brings when it opens its section,
    the break tokens it adds when it ends a section before another, its position, its section's rank among every
    section of ``keys`` in (conversation, session's earliest timestamp, session) order, and whether its conversation's
    sessions follow each other in time in that order (each session's latest timestamp before the next one's earliest,
    or equal to it with the next one's session after; a missing timestamp is last): then sections of any selection from
    it sort in that order, as ``TokenTable.cost`` sorts them (by conversation, earliest selected time, session)."""
    import numpy as np

    info = list(map(table.c_info.__getitem__, keys))
    col = lambda j, dtype=np.int64: np.fromiter(map(itemgetter(j), info), dtype, len(info))  # noqa: E731
    sess = list(map(itemgetter(6), info))
    uniq = list(dict.fromkeys(sess))
    first = np.fromiter(map(dict(zip(uniq, range(len(uniq)))).__getitem__, sess), np.int64, len(sess))
    ts = col(2, np.float64)
    lo, hi = np.full(len(uniq), np.inf), np.full(len(uniq), -np.inf)  # each session's earliest and latest timestamp
    np.minimum.at(lo, first, ts)
    np.maximum.at(hi, first, ts)
    lo_, hi_ = lo.tolist(), hi.tolist()
    order = sorted(range(len(uniq)), key=lambda j: (uniq[j][0], lo_[j], uniq[j][1]))
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    bad = {uniq[a][0] for a, b in zip(order, order[1:]) if uniq[a][0] == uniq[b][0]
           and (hi_[a] > lo_[b] or hi_[a] == lo_[b] and uniq[a][1] > uniq[b][1])}  # sessions that overlap in time
    ok = np.array([s[0] not in bad for s in uniq], dtype=bool)
    return col(3), col(4), col(5), col(1), rank[first], ok[first]


def c_prefix_costs(*, rows, n_hits, fixed: int, tok, anchor, brk, pos, section):
    """Format C cost of the first n memories of each row of ``rows`` (memory indices into the per-memory arrays, a row's
    first ``n_hits`` valid and distinct), n = 0 .. width: an (rows, width + 1) int64 array, equal to ``TokenTable.cost``
    when sections sort by ``section`` whatever is selected (``c_sections``' last column). A selection costs ``fixed`` +
    its lines' ``tok`` + per section the ``anchor`` of its lowest-position memory + per section but the last the ``brk`` of
    its highest-position memory (ties: the earliest selected); both are running min/max over the memories in selection
    order, per (row, section), so every prefix comes from cumulative sums."""
    import numpy as np

    nq, width = rows.shape
    out = np.zeros((nq, width + 1), dtype=np.int64)
    valid = np.arange(width)[None, :] < np.asarray(n_hits)[:, None]
    at = np.flatnonzero(valid)  # row * width + place in the selection: by row, then selection order
    if not len(at):
        return out
    flat = rows.ravel()
    qi = at // width
    sec = section[flat[at]]
    o = np.argsort(qi * (int(section.max()) + 1) + sec, kind="stable")  # by row, section, selection order
    at, qi, sec = at[o], qi[o], sec[o]
    js = at - qi * width
    first = np.ones(len(o), dtype=bool)
    first[1:] = (qi[1:] != qi[:-1]) | (sec[1:] != sec[:-1])
    seg = np.cumsum(first) - 1  # (row, section) segments
    p = pos[flat[at]] - int(pos.min())
    big = (int(p.max()) + 1) * width  # above every value below
    lift = (seg[-1] + 1 - seg) * big  # later segments lower: a running min restarts at each segment
    low = np.minimum.accumulate(p * width + js + lift) - lift  # lowest position so far, then earliest
    high = np.maximum.accumulate(p * width + (width - 1 - js) + seg * big) - seg * big  # highest position so far, then earliest
    base = at - js
    a_now, b_now = anchor[flat[base + low % width]], brk[flat[base + width - 1 - high % width]]
    step = np.zeros(nq * width, dtype=np.int64)  # what each memory adds to the anchors and breaks of every section
    step[at] = a_now - np.where(first, 0, np.roll(a_now, 1)) + b_now - np.where(first, 0, np.roll(b_now, 1))
    ends = np.zeros(nq * width, dtype=np.int64)  # the break of its section's highest-position memory once it is in
    ends[at] = b_now
    step = step.reshape(nq, width) + np.where(valid, tok[rows], 0)
    code = np.where(valid, section[rows], -1)
    cur = (code == np.maximum.accumulate(code, axis=1)) & valid  # it belongs to the last section so far
    latest = np.maximum.accumulate(np.where(cur, np.arange(width)[None, :], 0), axis=1)  # the last section's latest memory
    out[:, 1:] = fixed + np.cumsum(step, axis=1) - ends[latest + np.arange(0, nq * width, width)[:, None]]
    return out
