"""Any system's rankings read in: LongMemEval-style JSON, LongMemEval's retrieval logs and TREC runs.

Accepted files (the format is told by the content, not the name):

- **JSON object** ``{question_id: [id, ...]}``, each list ranked best first: what LongMemEval-style scorers take
  (and what ``recallbench export --format json`` writes).
- **LongMemEval retrieval log**: the records its ``src/retrieval/run_retrieval.py`` writes, one JSON object a line
  (or a JSON list of them), each ``{"question_id": ..., "retrieval_results": {"ranked_items": [{"corpus_id": ...},
  ...]}}`` best first (other fields are ignored). A record may also carry its list directly as ``"ranking"``.
- **TREC run** ``qid Q0 docid rank score tag`` (``bench.replay.trec.read_run``: ordered by score).

An id names, for the question's own conversation (the corpus's ``Question.conversation_id``), either a turn
or a session:

- a turn: its memory key ``<conversation_id>|<turn_id>`` (as TREC runs and exports carry it), or its bare turn id;
  for a LongMemEval corpus also LongMemEval's turn id ``<haystack_session_id>_<n>`` (n = 1-based position in the
  session, ``answer`` written ``noans`` for a turn without the answer, as ``run_retrieval.py`` names them);
- a session: ``<conversation_id>|session<ordinal>`` (``bench.metrics.ranked.session_map``, what the export writes), or,
  for a LongMemEval corpus, the source's ``haystack_session_ids`` entry (also with ``answer`` written ``noans``; read from the corpus's source files,
  only when an id needs it: the corpus keeps ordinals, never source ids, because those start with ``answer_``).

On a session-unit corpus (``memory.unit=session``, ``unit="session"``) a memory is a session: its memory key
``<conversation_id>|s<n>`` (what a ranking of that corpus's memories carries) or bare id ``s<n>`` is a session id,
the same as ``<conversation_id>|session<n>``.

One file is one level: its first id decides (a turn ranking is scored at turn and session level, a session
ranking at session level only: turn cells are NaN). A turn the question may not see (said after it, by
``bench.replay.visibility``), a session none of whose turns it may see, or a LongMemEval turn the corpus does not index
(empty text), is dropped and counted (so gold said after the question is a miss for every system, as for ours), as ``run_file=`` does; a memory of another conversation is an error.
A bad file stops with one line naming file, question and field (unknown question id, unknown doc id,
repeated id, a list that is not a list, an id that is not a string, an empty file, invalid JSON with line and
column); nothing is scored from it.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from bench.types import Corpus

log = logging.getLogger(__name__)

LEVELS = ("turn", "session")
_SESSION = re.compile(r"session(\d+)")


@dataclass(frozen=True)
class Ranking:
    """One system's ranking: per question id, the ids best first, normalised (turns: memory keys; sessions:
    ``<conversation_id>|session<ordinal>``), at ``level``. ``dropped``: hits the question may not see."""

    name: str
    path: str
    format: str  # "json", "longmemeval-log", "trec"
    level: str  # "turn" | "session"
    ranked: dict[str, tuple[str, ...]]
    dropped: int = 0


def read_ranking(path: Path, corpus: Corpus, *, name: str | None = None, unit: str = "turn") -> Ranking:
    """The ranking in ``path``, checked against ``corpus`` (see the module docstring); ValueError with one line.
    ``unit``: the corpus's memory unit (the run's meta.json ``memory.unit``): ``session`` makes its memory ids session ids."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read the ranking file ({type(e).__name__}: {e})") from None
    stripped = text.lstrip().lstrip("\ufeff")
    if not stripped:
        raise ValueError(f"{path}: the file is empty (a ranking: JSON {{question_id: [id, ...]}}, a LongMemEval retrieval log, or a TREC run)")
    if stripped[0] in "{[":
        fmt, lists = _json_lists(path, text)
    else:
        from bench.replay.trec import read_run

        run, tag = read_run(path, corpus)
        fmt, lists, name = "trec", [(q, f"question {q!r}", [d for d, _ in hits]) for q, hits in run.items()], name or tag
    resolver = _Resolver(corpus, path, unit)
    ranked: dict[str, tuple[str, ...]] = {}
    level = None
    dropped = 0
    for qid, where, ids in lists:
        if qid in ranked:
            raise ValueError(f"{path}: {where}: question id {qid!r} appears twice")
        if qid not in resolver.questions:
            raise ValueError(f"{path}: {where}: question id {qid!r} is not a question of {corpus.name} ({corpus.source})")
        out, seen = [], set()
        for i, raw in enumerate(ids):
            field = f"{where}: field [{i}]"
            if not isinstance(raw, str):
                raise ValueError(f"{path}: {field}: id {_short(raw)} is not a string")
            lv, key = resolver.resolve(qid, raw, field)
            if level is None:
                level = lv
            elif lv != level:
                raise ValueError(f"{path}: {field}: id {raw!r} is a {lv} id but the file's first id is a {level} id (one level per file)")
            if key in seen and key:
                raise ValueError(f"{path}: {field}: id {raw!r} repeated in the list of question {qid!r}")
            seen.add(key)
            if not key or not resolver.visible(qid, key, lv):
                dropped += 1
                continue
            out.append(key)
        ranked[qid] = tuple(out)
    if not ranked:
        raise ValueError(f"{path}: the file ranks no question")
    if dropped:
        log.warning("%s: %d hits dropped: said after the question (a session: all of it), or a turn the corpus does not index (empty text)", path, dropped)
    return Ranking(name or path.stem, str(path), fmt, level or "turn", ranked, dropped)


def _short(value) -> str:
    s = json.dumps(value)[:60] if not isinstance(value, str) else repr(value[:60])
    return f"{s} ({type(value).__name__})"


def _json_lists(path: Path, text: str) -> tuple[str, list[tuple[str, str, list]]]:
    """(format, [(question id, where, ids), ...]) of a JSON file: an object of lists, a list of records, or JSON lines."""
    try:
        data = json.loads(text)
        records = None
    except json.JSONDecodeError as e:
        lines = text.splitlines()
        if not _json_line(next(ln for ln in lines if ln.strip())) or sum(1 for ln in lines if ln.strip()) < 2:
            raise ValueError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
        records = []
        for n, ln in enumerate(lines, 1):  # JSON lines: one record a line
            if not ln.strip():
                continue
            try:
                records.append((f"line {n}", json.loads(ln)))
            except json.JSONDecodeError as e2:
                raise ValueError(f"{path}: invalid JSON at line {n} column {e2.colno}: {e2.msg}") from None
    if records is None and isinstance(data, dict) and not _is_record(data):
        out = []
        for qid, ids in data.items():
            where = f"question {qid!r}"
            if not isinstance(ids, list):
                raise ValueError(f"{path}: {where}: value {_short(ids)} is not a list of ids ranked best first")
            out.append((qid, where, ids))
        return "json", out
    if records is None:
        records = [(f"record [{i}]", r) for i, r in enumerate(data)] if isinstance(data, list) else [("record [0]", data)]
    return "longmemeval-log", [_record(path, where, r) for where, r in records]


def _json_line(line: str) -> bool:
    """True when ``line`` alone is a JSON object (the file is then JSON lines, one record a line)."""
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _is_record(data: dict) -> bool:
    return "question_id" in data and ("retrieval_results" in data or "ranking" in data)


def _record(path: Path, where: str, r) -> tuple[str, str, list]:
    """(question id, where, ids) of one LongMemEval retrieval-log record."""
    if not isinstance(r, dict):
        raise ValueError(f"{path}: {where}: {_short(r)} is not a record {{question_id, retrieval_results: {{ranked_items}}}}")
    qid = r.get("question_id")
    if not isinstance(qid, str):
        raise ValueError(f"{path}: {where}: field question_id {_short(qid)} is not a string")
    where = f"{where} (question {qid!r})"
    if "ranking" in r:
        ids, field = r["ranking"], "ranking"
    else:
        res = r.get("retrieval_results")
        items = res.get("ranked_items") if isinstance(res, dict) else None
        field = "retrieval_results.ranked_items"
        if not isinstance(items, list):
            raise ValueError(f"{path}: {where}: field {field} {_short(items)} is not a list")
        ids = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or "corpus_id" not in item:
                raise ValueError(f"{path}: {where}: field {field}[{i}] {_short(item)} is not an object with a corpus_id")
            ids.append(item["corpus_id"])
    if not isinstance(ids, list):
        raise ValueError(f"{path}: {where}: field {field} {_short(ids)} is not a list of ids ranked best first")
    return qid, f"{where} {field}", ids


class _Resolver:
    """Maps an id of one question's list to (level, normalised key); ValueError naming the field otherwise."""

    def __init__(self, corpus: Corpus, path: Path, unit: str = "turn"):
        self.corpus, self.path, self.unit = corpus, path, unit
        self.questions = {q.question_id: q for q in corpus.questions}
        self.turns = {t.key: t for c in corpus.conversations for t in c.turns}
        self.sessions = {c.conversation_id: {t.session for t in c.turns} for c in corpus.conversations}
        self.by_session: dict[str, list] = {}
        for t in self.turns.values():
            self.by_session.setdefault(f"{t.conversation_id}|session{t.session}", []).append(t)
        self._source: dict[str, dict[str, tuple[str, str]]] | None = None

    def resolve(self, qid: str, raw: str, field: str) -> tuple[str, str]:
        q = self.questions[qid]
        conv = q.conversation_id
        t = self.turns.get(raw)
        if t is not None:
            if t.conversation_id != conv:
                raise ValueError(f"{self.path}: {field}: id {raw!r} is a memory of conversation {t.conversation_id!r}, "
                                 f"not of question {qid!r}, whose conversation is {conv!r}")
            return self._memory(t)
        if f"{conv}|{raw}" in self.turns:
            return self._memory(self.turns[f"{conv}|{raw}"])
        c, sep, rest = raw.rpartition("|")
        m = _SESSION.fullmatch(rest) if sep else None
        if m and c in self.sessions:
            if c != conv:
                raise ValueError(f"{self.path}: {field}: id {raw!r} is a session of conversation {c!r}, "
                                 f"not of question {qid!r}, whose conversation is {conv!r}")
            if int(m.group(1)) in self.sessions[c]:
                return "session", f"{c}|session{int(m.group(1))}"
        hit = self.source_ids().get(conv, {}).get(raw)
        if hit is not None:
            return hit
        raise ValueError(f"{self.path}: {field}: id {raw!r} is not a turn or session of question {qid!r} (conversation "
                         f"{conv!r}) in {self.corpus.name} (turns: '<conversation_id>|<turn_id>' or the turn id; sessions: "
                         f"'<conversation_id>|session<n>'{'; or LongMemEval haystack session / turn ids' if self._lme() else ''})")

    def _memory(self, t) -> tuple[str, str]:
        """(level, key) of a memory of the corpus: a turn, or on a session-unit corpus its session (the memory is one)."""
        if self.unit == "session":
            return "session", f"{t.conversation_id}|session{t.session}"
        return "turn", t.key

    def visible(self, qid: str, key: str, level: str = "turn") -> bool:
        """A turn the question may see (``bench.replay.visibility``); a session holding at least one such turn."""
        from bench.replay.visibility import question_filter, visible

        where = question_filter(self.questions[qid])
        if level == "turn":
            return visible(self.turns[key], where)
        return any(visible(t, where) for t in self.by_session.get(key, ()))

    def _lme(self) -> bool:
        return self.corpus.name.startswith("longmemeval")

    def source_ids(self) -> dict[str, dict[str, tuple[str, str]]]:
        """{conversation: {LongMemEval session or turn id: (level, key)}} from the corpus's source files (read once)."""
        if self._source is None:
            self._source = _longmemeval_ids(self.corpus) if self._lme() else {}
        return self._source


def _longmemeval_ids(corpus: Corpus) -> dict[str, dict[str, tuple[str, str]]]:
    """LongMemEval's own ids of a LongMemEval corpus, mapped to ours: ``haystack_session_ids[i]`` -> session i, and
    ``<session id>_<j+1>`` (also with ``answer`` written ``noans``) -> turn ``s<i>:t<j>`` when the corpus has it.
    {} when the source cannot be read (its ids are then unknown ids)."""
    src = Path(corpus.source) if corpus.source else None
    if src is None or not src.exists():
        log.warning("%s: source %s not found: LongMemEval haystack ids cannot be mapped", corpus.name, corpus.source)
        return {}
    files = sorted(src.glob("*.json")) if src.is_dir() else [src]
    keys = {t.key for c in corpus.conversations for t in c.turns}
    wanted = {c.conversation_id for c in corpus.conversations}
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            log.warning("%s: cannot read %s for LongMemEval ids (%s)", corpus.name, f, e)
            continue
        for item in data if isinstance(data, list) else [data]:
            qid = item.get("question_id") if isinstance(item, dict) else None
            if qid not in wanted:
                continue
            ids: dict[str, tuple[str, str]] = {}
            for i, (sid, session) in enumerate(zip(item.get("haystack_session_ids") or [], item.get("haystack_sessions") or [])):
                if not isinstance(sid, str):
                    continue
                for form in {sid, sid.replace("answer", "noans")}:  # run_retrieval.py's name of an answer session without the answer
                    ids[form] = ("session", f"{qid}|session{i}")
                for j in range(len(session) if isinstance(session, list) else 0):
                    key = f"{qid}|s{i}:t{j}"  # a turn the loader skipped (empty text) is known but not a memory: dropped, counted
                    for form in {f"{sid}_{j + 1}", f"{sid}_{j + 1}".replace("answer", "noans")}:
                        ids[form] = ("turn", key if key in keys else "")
            out[qid] = ids
    return out
