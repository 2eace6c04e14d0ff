"""Corpus snapshot: a loaded ``Corpus`` written to one gzip JSON file and read back exactly.

A job stores the corpus it measured beside its results, so whatever reads the run later (report,
calibration, attribution, the Python API) needs neither the dataset files nor the loader config.
Every field of every turn, question and defect is kept; turns are stored column-wise per
conversation (roles and speakers repeat, so they compress well). Floats survive JSON exactly
(shortest repr), ``None`` stays ``None``. ``bench.results.rundir`` checks a loaded snapshot against the
job's ``corpus_sha256`` (``bench.run.corpus_digest``).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
from pathlib import Path

from bench.types import Conversation, Corpus, Defect, Question, Turn

FORMAT = "recallbench-corpus-v1"
TURN_FIELDS = ("turn_id", "role", "speaker", "text", "timestamp", "position", "session")
QUESTION_FIELDS = ("question_id", "conversation_id", "text", "asked_at", "evidence", "category", "adversarial", "answer")
DEFECT_FIELDS = ("file", "record", "field", "kind", "value", "action")


def to_plain(corpus: Corpus) -> dict:
    """The corpus as plain JSON-able data (see the module docstring)."""
    return {**_head(corpus), "conversations": [_conversation(c) for c in corpus.conversations], **_tail(corpus)}


def _head(corpus: Corpus) -> dict:
    return {"format": FORMAT, "name": corpus.name, "source": corpus.source}


def _conversation(c: Conversation) -> dict:
    return {"conversation_id": c.conversation_id, **{f: [getattr(t, f) for t in c.turns] for f in TURN_FIELDS},
            # Turn.metadata, only for a corpus that has some (a corpus without keeps its bytes)
            **({"metadata": [[[k, list(v) if isinstance(v, tuple) else v] for k, v in t.metadata] for t in c.turns]}
               if any(t.metadata for t in c.turns) else {})}


def _tail(corpus: Corpus) -> dict:
    return {"questions": {f: [list(q.evidence) if f == "evidence" else getattr(q, f) for q in corpus.questions] for f in QUESTION_FIELDS},
            "defects": {f: [getattr(d, f) for d in corpus.defects] for f in DEFECT_FIELDS}}


def from_plain(data: dict, *, where: str = "corpus snapshot") -> Corpus:
    """The ``Corpus`` that ``to_plain`` wrote."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: field format is {got!r}, expected {FORMAT!r}")
    convs = []
    for c in data["conversations"]:
        cid = c["conversation_id"]
        turns = tuple(Turn(cid, *row) for row in zip(*(c[f] for f in TURN_FIELDS)))
        if "metadata" in c:
            turns = tuple(Turn(cid, *row, tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in m))
                          for *row, m in zip(*(c[f] for f in TURN_FIELDS), c["metadata"]))
        convs.append(Conversation(cid, turns))
    q = data["questions"]
    questions = tuple(Question(*row[:4], tuple(row[4]), *row[5:]) for row in zip(*(q[f] for f in QUESTION_FIELDS)))
    d = data["defects"]
    defects = tuple(Defect(*row) for row in zip(*(d[f] for f in DEFECT_FIELDS)))
    return Corpus(data["name"], tuple(convs), questions, defects, data["source"])


def dump(corpus: Corpus, path: str | os.PathLike) -> Path:
    """Write ``corpus`` to ``path`` (gzip JSON; no name or time in its header, so the same corpus gives the same bytes).
    The JSON of ``to_plain`` is written a conversation at a time: the whole text never exists at once (at LongMemEval_S
    size it was ~2 GB of transient strings)."""
    path = Path(path)
    dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"))
    with open(path, "wb") as f, gzip.GzipFile(filename="", fileobj=f, mode="wb", compresslevel=6, mtime=0) as gz:
        gz.write(dumps(_head(corpus))[:-1].encode("utf-8") + b',"conversations":[')
        for i, c in enumerate(corpus.conversations):
            gz.write((b"," if i else b"") + dumps(_conversation(c)).encode("utf-8"))
        gz.write(b"]," + dumps(_tail(corpus))[1:].encode("utf-8"))
    return path


def load(path: str | os.PathLike) -> Corpus:
    """Read a snapshot written by ``dump``; a damaged file is a ValueError naming it."""
    path = Path(path)
    try:
        data = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
        return from_plain(data, where=str(path))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{path}: not a readable corpus snapshot ({type(e).__name__}: {e})") from None
