"""Dataset card: a markdown summary of a Corpus (sizes, categories, tokens) and its defect report.

``dataset_card(corpus)`` returns the text (the report embeds it; ``recallbench data check``
prints it); ``defect_kinds(corpus)`` returns ``[(kind, count, examples)]``, most frequent first;
``defect_summary(defects)`` the one line "3 label defects: 2 evidence_not_found, 1 gold_after_asked_at".
Tokens are counted with ``bench.data.tokens.count_tokens(text, "cl100k_base")`` when that module is
importable and works, else estimated as characters / 4 and labelled so.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from bench.data.timeline import ASKED_BEFORE, GOLD_AFTER
from bench.types import Corpus, Defect

log = logging.getLogger(__name__)

ENCODING = "cl100k_base"
EXAMPLES = 3


def defect_kinds(corpus: Corpus, examples: int = EXAMPLES) -> list[tuple[str, int, tuple[Defect, ...]]]:
    """(kind, count, up to ``examples`` defects of that kind), by count descending, then kind."""
    by_kind: dict[str, list[Defect]] = {}
    for d in corpus.defects:
        by_kind.setdefault(d.kind, []).append(d)
    rows = [(kind, len(ds), tuple(ds[:examples])) for kind, ds in by_kind.items()]
    return sorted(rows, key=lambda r: (-r[1], r[0]))


def defect_summary(defects: Iterable[Defect]) -> str:
    """One line: "3 label defects: 2 evidence_not_found, 1 gold_after_asked_at" (by count descending, then
    kind), or "no label defects"."""
    counts = Counter(d.kind for d in defects)
    if not counts:
        return "no label defects"
    total = sum(counts.values())
    parts = ", ".join(f"{n:,} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{total:,} label defect{'s' if total != 1 else ''}: {parts}"


def count_corpus_tokens(texts: Sequence[str]) -> tuple[int, str]:
    """Total tokens of ``texts`` and a label saying how they were counted."""
    try:
        from bench.data.tokens import count_tokens
    except ImportError:
        return _chars4(texts), "≈ chars/4 (bench.data.tokens not importable)"
    try:
        return sum(count_tokens(t, ENCODING) for t in texts), f"{ENCODING} (tiktoken)"
    except Exception as e:  # offline tokenizer files missing, ...: still print a card
        log.warning("token counting with bench.data.tokens failed (%s); falling back to chars/4", e)
        return _chars4(texts), f"≈ chars/4 (bench.data.tokens failed: {type(e).__name__})"


def _chars4(texts: Sequence[str]) -> int:
    return round(sum(len(t) for t in texts) / 4)


def _cell(text: str) -> str:
    from bench.output import md_text

    return md_text(text)


def _code(text: str) -> str:
    from bench.output import md_code

    return md_code(text)


def _unreachable(defects: Sequence[Defect]) -> str:
    hits = [d for d in defects if d.kind == GOLD_AFTER]
    questions = len({(d.file, d.record) for d in hits})
    return f"{len(hits):,} in {questions:,} question{'s' if questions != 1 else ''}" if hits else "0"


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):.2f}" if values else "n/a"


def dataset_card(corpus: Corpus, count: Callable[[Sequence[str]], tuple[int, str]] | None = None) -> str:
    """Markdown card of ``corpus``. ``count`` overrides the token counter (texts -> (total, label))."""
    turns = corpus.turns()
    roles = Counter(t.role for t in turns)
    sessions = {(t.conversation_id, t.session) for t in turns}
    qs = corpus.questions
    scored = [q for q in qs if not q.adversarial]
    n_conv = len(corpus.conversations)
    tokens, label = (count or count_corpus_tokens)([t.text for t in turns])
    role_text = ", ".join(f"{r} {n:,}" for r, n in sorted(roles.items()))
    lines = [
        f"### Dataset card: {_cell(corpus.name)}",
        "",
        f"Source: {_code(corpus.source)}" if corpus.source else "Source: (not recorded)",
        "",
        "| measure | value |",
        "|---|---|",
        f"| conversations | {n_conv:,} |",
        f"| sessions | {len(sessions):,} |",
        f"| turns | {len(turns):,} ({role_text}) |" if turns else "| turns | 0 |",
        f"| turns per conversation (mean) | {_mean([len(c.turns) for c in corpus.conversations])} |",
        f"| questions | {len(qs):,} ({len(qs) - len(scored):,} adversarial, {len(scored):,} non-adversarial) |",
        f"| gold turns per question (mean, all) | {_mean([len(q.evidence) for q in qs])} |",
        f"| gold turns per question (mean, non-adversarial) | {_mean([len(q.evidence) for q in scored])} |",
        f"| non-adversarial questions without gold | {sum(not q.evidence for q in scored):,} |",
        f"| gold turns after asked_at (unreachable, scored as misses) | {_unreachable(corpus.defects)} |",
        f"| questions asked before their conversation (see no turn) | "
        f"{sum(d.kind == ASKED_BEFORE for d in corpus.defects):,} |",
        f"| tokens, {_cell(label)} | {tokens:,} total, {tokens / n_conv if n_conv else 0:,.0f} per conversation |",
        f"| defects | {len(corpus.defects):,} |",
        "",
        "#### Questions by category",
        "",
        "| category | questions | adversarial | gold turns (mean) |",
        "|---|---:|---:|---:|",
    ]
    cats: dict[str, list] = {}
    for q in qs:
        cats.setdefault(q.category, []).append(q)
    for cat, items in sorted(cats.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        adv = sum(q.adversarial for q in items)
        gold = _mean([len(q.evidence) for q in items])
        lines.append(f"| {_cell(cat or '(none)')} | {len(items):,} | {adv:,} | {gold} |")
    lines += ["", "#### Defects", ""]
    summary = defect_kinds(corpus)
    if not summary:
        lines.append("No defects found.")
    for kind, n, examples in summary:
        lines.append(f"- `{kind}`: {n:,}")
        for d in examples:
            lines.append(f"  - {_cell(d.record)} {_cell(d.field)} {_cell(d.value)} -> {_cell(d.action)}")
    return "\n".join(lines) + "\n"
