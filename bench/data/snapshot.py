"""Corpus snapshot: a loaded ``Corpus`` written to one gzip file and read back exactly.

A job stores the corpus it measured beside its results, so whatever reads the run later (report,
calibration, attribution, the Python API) needs neither the dataset files nor the loader config.
Every field of every turn, question and defect is kept; turns are stored column-wise per
conversation (roles and speakers repeat, so they compress well). Floats survive JSON exactly
(shortest repr), ``None`` stays ``None``. ``bench.results.rundir`` checks a loaded snapshot against the
job's ``corpus_sha256`` (``bench.run.corpus_digest``).

The file is JSON lines (``recallbench-corpus-v2``): a head (format, name, source, number of conversations), one line
per conversation, then the questions and defects. It is written and read a line at a time: at LongMemEval_S size the
corpus as one JSON text (``recallbench-corpus-v1``, still read) raised the process's peak by 1.9 GB while writing it and
by 1.0 GB while reading it.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

from bench.types import Conversation, Corpus, Defect, Question, Turn

FORMAT = "recallbench-corpus-v2"
FORMAT_V1 = "recallbench-corpus-v1"  # one JSON document (to_plain), written before v2
TURN_FIELDS = ("turn_id", "role", "speaker", "text", "timestamp", "position", "session")
QUESTION_FIELDS = ("question_id", "conversation_id", "text", "asked_at", "evidence", "category", "adversarial", "answer")
DEFECT_FIELDS = ("file", "record", "field", "kind", "value", "action")


def to_plain(corpus: Corpus) -> dict:
    """The corpus as one plain JSON-able document (the v1 layout; ``dump`` writes the same pieces as lines)."""
    return {"format": FORMAT_V1, "name": corpus.name, "source": corpus.source,
            "conversations": [_conversation(c) for c in corpus.conversations], **_tail(corpus)}


def _conversation(c: Conversation) -> dict:
    return {"conversation_id": c.conversation_id, **{f: [getattr(t, f) for t in c.turns] for f in TURN_FIELDS},
            # Turn.metadata, only for a corpus that has some (a corpus without keeps its bytes)
            **({"metadata": [[[k, list(v) if isinstance(v, tuple) else v] for k, v in t.metadata] for t in c.turns]}
               if any(t.metadata for t in c.turns) else {})}


def _tail(corpus: Corpus) -> dict:
    return {"questions": {f: [list(q.evidence) if f == "evidence" else getattr(q, f) for q in corpus.questions] for f in QUESTION_FIELDS},
            "defects": {f: [getattr(d, f) for d in corpus.defects] for f in DEFECT_FIELDS}}


def from_plain(data: dict, *, where: str = "corpus snapshot") -> Corpus:
    """The ``Corpus`` that ``to_plain`` made (a v1 snapshot)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT_V1:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: field format is {got!r}, expected {FORMAT!r} or {FORMAT_V1!r}")
    return _corpus(data, map(_turns, data["conversations"]), data)


def _turns(c: dict) -> Conversation:
    cid = c["conversation_id"]
    if "metadata" in c:
        return Conversation(cid, tuple(Turn(cid, *row, tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in m))
                                       for *row, m in zip(*(c[f] for f in TURN_FIELDS), c["metadata"])))
    return Conversation(cid, tuple(Turn(cid, *row) for row in zip(*(c[f] for f in TURN_FIELDS))))


def _corpus(head: dict, conversations, tail: dict) -> Corpus:
    q, d = tail["questions"], tail["defects"]
    questions = tuple(Question(*row[:4], tuple(row[4]), *row[5:]) for row in zip(*(q[f] for f in QUESTION_FIELDS)))
    defects = tuple(Defect(*row) for row in zip(*(d[f] for f in DEFECT_FIELDS)))
    return Corpus(head["name"], tuple(conversations), questions, defects, head["source"])


def dump(corpus: Corpus, path: str | os.PathLike) -> Path:
    """Write ``corpus`` to ``path``, a line at a time (gzip JSON lines; no name or time in the gzip header, so the same
    corpus gives the same bytes)."""
    path = Path(path)
    head = {"format": FORMAT, "name": corpus.name, "source": corpus.source, "conversations": len(corpus.conversations)}
    with open(path, "wb") as f, gzip.GzipFile(filename="", fileobj=f, mode="wb", compresslevel=6, mtime=0) as gz:
        for part in (head, *map(_conversation, corpus.conversations), _tail(corpus)):
            gz.write(json.dumps(part, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")
    return path


def load(path: str | os.PathLike) -> Corpus:
    """Read a snapshot written by ``dump`` (or a v1 one), a line at a time; a damaged file is a ValueError naming it."""
    path = Path(path)
    try:
        with gzip.open(path, "rb") as raw:
            lines = io.TextIOWrapper(raw, encoding="utf-8")
            head = json.loads(lines.readline())
            if isinstance(head, dict) and head.get("format") == FORMAT:
                convs = [_turns(json.loads(lines.readline())) for _ in range(head["conversations"])]
                return _corpus(head, convs, json.loads(lines.readline()))
            return from_plain(head, where=str(path))  # v1: the whole corpus was the first line
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{path}: not a readable corpus snapshot ({type(e).__name__}: {e})") from None
