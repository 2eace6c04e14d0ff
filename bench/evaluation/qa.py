"""Answer-level metrics of a finished run: an LLM reads the injected context and answers, an LLM judge grades it.

For chosen operating points (strategy @ threshold; by default each dataset's recommended point and full
context) and a seeded sample of questions, the injected context is rebuilt from the run directory (the
corpus snapshot, the trace and the run's own strategies, replayed through ``bench.selection.sweep`` by
``bench.analysis.attribution.replay``: nothing here re-implements a strategy) and rendered in an
injection format (``bench.selection.formats.render``, format A by default: the text the run's token counts price).

Per question and point:

* the **reader** gets the context and the question (``reader_messages``) and answers in a short phrase,
  or exactly ``ABSTAIN`` when the memories do not hold the answer;
* the **judge** (a LoCoMo / mem0-style J prompt, ``judge_messages``) labels the answer CORRECT or WRONG
  against the gold answer, generously (same fact or date, any wording), as JSON ``{"label": ...}``;
* **token F1**: SQuAD's normalised token F1 of the answer against the gold answer.

Counting rule for adversarial questions (the gold is "no answer"): the answer is CORRECT, with token
F1 1, exactly when the reader abstains (its normalised answer contains the normalised ``ABSTAIN``
phrase), else WRONG with F1 0; no judge call is made for them. A judge reply that names neither label
leaves J undefined (NaN) for that question. Questions without a gold answer that are not adversarial
are not sampled.

Accuracy (J) and F1 are means over the sampled questions with 95 % CIs of the mean over conversations like
these (Student t with conversations - 1 df, ``bench.analysis.stats.mean_intervals``); each point's J is compared with full context's on the same
questions (difference, its CI and p from the paired t test over conversations, ``bench.analysis.stats.paired_t_test``:
the report's one decision rule, so the CI excludes 0 exactly when p < 0.05). Dollars per 1,000 questions are the
reader's recorded cost x 1000 / questions (what answering with that context costs);
``eval_usd_per_1k_questions`` adds the judge's (what the evaluation costs). A cached call keeps the cost
it had when it was sent.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.evaluation.llm import Cache, ChatClient, LLMConfig, cached_call, message_tokens
from bench.metrics.text import normalize_answer, token_f1  # noqa: F401  (qa.token_f1: re-exported)
from bench.output import md_text
from bench.types import Question

log = logging.getLogger(__name__)

TEMPLATE_VERSION = "answers-v1"  # change whenever a prompt below changes (it is part of every cache key)
ABSTAIN = "No information available"
FULL = "full_context"  # the full-context point's label
NAN = float("nan")

READER_SYSTEM = (
    "You answer a question about a user's past conversations using only the memories given "
    "(one per line, 'role: message'). Reply with a short phrase, no explanation. "
    f"If the memories do not contain the answer, reply exactly: {ABSTAIN}"
)
READER_USER = "Memories:\n{context}\n\nQuestion: {question}\nAnswer:"

JUDGE_SYSTEM = (
    "You grade answers to questions about a user's past conversations. You get the question, the gold "
    "(ground truth) answer and a generated answer. Label the generated answer CORRECT if it states the "
    "same fact as the gold answer, even in other words, longer, or in another date format (a date or time "
    "period that refers to the same one counts); else WRONG. Be generous about wording, strict about facts. "
    'Reply with JSON only: {"label": "CORRECT"} or {"label": "WRONG"}.'
)
JUDGE_USER = "Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}"


# --------------------------------------------------------------------------- pure parts

def abstains(answer: str) -> bool:
    return normalize_answer(ABSTAIN) in normalize_answer(answer)


def parse_label(text: str) -> str:
    """CORRECT / WRONG from the judge's reply (JSON ``label``, else the one label word it contains); "" when neither."""
    m = re.search(r"\{.*?\}", text or "", re.S)
    if m:
        try:
            label = str(json.loads(m.group(0)).get("label", "")).strip().upper()
            if label in ("CORRECT", "WRONG"):
                return label
        except (ValueError, AttributeError):
            pass
    found = set(re.findall(r"\b(CORRECT|WRONG)\b", (text or "").upper()))
    return found.pop() if len(found) == 1 else ""


def reader_messages(context: str, question: str) -> list[dict]:
    return [{"role": "system", "content": READER_SYSTEM},
            {"role": "user", "content": READER_USER.format(context=context or "(none)", question=question)}]


def judge_messages(question: str, gold: str, answer: str) -> list[dict]:
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_USER.format(question=question, gold=gold, answer=answer)}]


@dataclass(frozen=True)
class Point:
    strategy: str
    threshold: float | None = None

    @property
    def label(self) -> str:
        return self.strategy if self.threshold is None else f"{self.strategy}@{self.threshold:g}"


def setting_tag(*, fmt: str, llm: str, sample: int, seed: int, points: Sequence[Point] | None = None) -> str:
    """The name part of one ``recallbench answer`` setting's outputs (``answers-<tag>.csv``): the injection format, the LLM
    config, the sample size and seed, and (when ``--points`` is given) a digest of the points, so two settings never
    write the same files. Characters outside [A-Za-z0-9_.] become ``_``."""
    parts = [f"format{fmt}", str(llm), f"n{sample}", f"seed{seed}"]
    if points:
        parts.append("points" + hashlib.sha1(",".join(p.label for p in points).encode("utf-8")).hexdigest()[:8])
    return "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", x) for x in parts)


def parse_points(text: str) -> list[Point]:
    """``strategy@threshold,strategy,...`` -> points (``full_context`` is the full-context point)."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, _, thr = part.partition("@")
        try:
            out.append(Point(name.strip(), round(float(thr), 10) if thr.strip() else None))
        except ValueError:
            raise ValueError(f"--points: {part!r}: the threshold after '@' must be a number") from None
    if not out:
        raise ValueError("--points: no point given (strategy@threshold,...)")
    return out


def sample_questions(questions: Sequence[Question], n: int, seed: int) -> list[Question]:
    """A seeded sample of ``n`` questions that can be graded (adversarial, or with a gold answer), in corpus order."""
    pool = [q for q in questions if q.adversarial or q.answer.strip()]
    if n >= len(pool):
        return pool
    idx = np.sort(np.random.default_rng(seed).choice(len(pool), size=n, replace=False))
    return [pool[i] for i in idx]


@dataclass(frozen=True)
class Item:
    """One (operating point, question) with its injected context."""

    dataset: str
    embedder: str
    backend: str
    point: Point
    question: Question
    context: str
    injected_tokens: int

    @property
    def context_sha256(self) -> str:
        return hashlib.sha256(self.context.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Estimate:
    calls: int  # to send (not cached)
    cached: int  # answered from the cache
    reader_calls: int
    judge_calls: int
    tokens_in: int
    tokens_out: int  # the bound: max_tokens per call
    usd: float

    def line(self, cfg: LLMConfig) -> str:
        return (f"{self.calls} calls to send ({self.reader_calls} reader + {self.judge_calls} judge; {self.cached} more "
                f"answered from the cache): {self.tokens_in:,} input tokens (cl100k_base), at most {self.tokens_out:,} "
                f"output tokens: ${self.usd:.4f} with outputs at that bound, at ${cfg.price_in:g} / ${cfg.price_out:g} per "
                f"million input / output tokens ({cfg.model})")


def estimate(items: Sequence[Item], cfg: LLMConfig, cache: Cache) -> Estimate:
    """Calls, tokens and dollars the answers of ``items`` will cost, before anything is sent.

    Reader input = cl100k tokens of its messages; a judge call's input = its messages with an empty
    answer + the reader's ``max_tokens`` (the longest answer); outputs = ``max_tokens`` / ``judge_max_tokens``.
    A cached reader reply is known, so its judge call is looked up in the cache too. Identical reader calls
    within the plan count once (the rest are answered from the cache). Judge calls of uncached readers are
    counted each, so the count is an upper bound when two points produce the same answer.
    """
    n_reader = n_judge = cached = t_in = t_out = 0
    planned: set[str] = set()  # the same reader call twice in this plan (two points inject the same context) is sent once
    for it in items:
        q = it.question
        msgs = reader_messages(it.context, q.text)
        key = Cache.key(cfg, TEMPLATE_VERSION, msgs, cfg.max_tokens)
        hit = cache.get(key)
        if hit is None and key in planned:
            cached += 1 + (not q.adversarial)  # its judge call is the same too
            continue
        planned.add(key)
        if hit is None:
            n_reader += 1
            t_in += message_tokens(msgs)
            t_out += cfg.max_tokens
        else:
            cached += 1
        if q.adversarial:
            continue
        if hit is not None:
            jm = judge_messages(q.text, q.answer, hit["text"])
            if cache.get(Cache.key(cfg, TEMPLATE_VERSION, jm, cfg.judge_max_tokens)) is not None:
                cached += 1
                continue
            t_in += message_tokens(jm)
        else:
            t_in += message_tokens(judge_messages(q.text, q.answer, "")) + cfg.max_tokens
        n_judge += 1
        t_out += cfg.judge_max_tokens
    return Estimate(n_reader + n_judge, cached, n_reader, n_judge, t_in, t_out, cfg.cost(t_in, t_out))


def answer_items(items: Sequence[Item], cfg: LLMConfig, cache: Cache, client: ChatClient | None) -> pd.DataFrame:
    """Read, judge and score every item (cached calls are not sent): one row per (point, question)."""
    from bench.progress import progress

    rows = []
    with progress(len(items), "answer", unit="question") as bar:
        for it in items:
            q = it.question
            reply, r_cached = cached_call(client, cache, TEMPLATE_VERSION, reader_messages(it.context, q.text), cfg.max_tokens, cfg)
            answer = reply.text.strip()
            judge = None
            if q.adversarial:
                ok = abstains(answer)
                label, f1 = ("CORRECT" if ok else "WRONG"), float(ok)
            else:
                judge, j_cached = cached_call(client, cache, TEMPLATE_VERSION, judge_messages(q.text, q.answer, answer),
                                              cfg.judge_max_tokens, cfg)
                label, f1 = parse_label(judge.text), token_f1(answer, q.answer)
            rows.append({
                "dataset": it.dataset, "embedder": it.embedder, "backend": it.backend, "point": it.point.label,
                "strategy": it.point.strategy, "threshold": NAN if it.point.threshold is None else it.point.threshold,
                "question_id": q.question_id, "conversation_id": q.conversation_id, "category": q.category,
                "adversarial": q.adversarial, "question": q.text, "gold": ABSTAIN if q.adversarial else q.answer,
                "answer": answer, "label": label, "correct": {"CORRECT": 1.0, "WRONG": 0.0}.get(label, NAN), "f1": f1,
                "injected_tokens": it.injected_tokens, "context_sha256": it.context_sha256,
                "reader_tokens_in": reply.tokens_in, "reader_tokens_out": reply.tokens_out, "reader_latency_s": reply.latency_s,
                "reader_cost_usd": reply.cost_usd, "reader_cached": r_cached, "usage_source": reply.usage_source,
                "judge_tokens_in": judge.tokens_in if judge else 0, "judge_tokens_out": judge.tokens_out if judge else 0,
                "judge_latency_s": judge.latency_s if judge else NAN, "judge_cost_usd": judge.cost_usd if judge else 0.0,
                "judge_cached": j_cached if judge else None,
                "cost_usd": reply.cost_usd + (judge.cost_usd if judge else 0.0),
            })
            bar.update(1)
    return pd.DataFrame(rows)


SUMMARY_KEYS = ["dataset", "embedder", "backend", "point", "strategy", "threshold"]


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Per point: J and token F1 with 95 % CIs of the mean over conversations (t with conversations - 1 df,
    ``bench.analysis.stats.mean_intervals``; none with 1 conversation), J on answerable questions,
    mean injected tokens and reader input tokens, dollars per 1,000 questions (reader; reader + judge), mean reader latency."""
    from bench.analysis.stats import cluster_sums, mean_intervals

    out = []
    for key, g in rows.groupby(SUMMARY_KEYS, dropna=False, sort=False):
        _, sums, counts = cluster_sums(g[["correct", "f1"]].to_numpy(np.float64), g["conversation_id"].astype(str).tolist())
        b = mean_intervals(sums, counts, bounds=(0.0, 1.0))
        ans = g[~g["adversarial"].astype(bool)]
        out.append({**dict(zip(SUMMARY_KEYS, key)), "n_questions": len(g), "n_adversarial": int(g["adversarial"].sum()),
                    "n_unjudged": int(g["correct"].isna().sum()),
                    "accuracy_j": float(b.point[0]), "accuracy_j_lo": float(b.low[0]), "accuracy_j_hi": float(b.high[0]),
                    "token_f1": float(b.point[1]), "token_f1_lo": float(b.low[1]), "token_f1_hi": float(b.high[1]),
                    "accuracy_j_answerable": float(ans["correct"].mean()) if len(ans) else NAN,
                    "injected_tokens": float(g["injected_tokens"].mean()),
                    "reader_tokens_in": float(g["reader_tokens_in"].mean()),
                    "usd_per_1k_questions": 1000.0 * float(g["reader_cost_usd"].mean()),
                    "eval_usd_per_1k_questions": 1000.0 * float(g["cost_usd"].mean()),
                    "reader_latency_s": float(g["reader_latency_s"].mean()),
                    **_versus_full(rows, dict(zip(SUMMARY_KEYS, key)))})
    return pd.DataFrame(out)


def _versus_full(rows: pd.DataFrame, where: dict) -> dict:
    """J of this point minus J of full context on the same questions: the difference, its 95 % CI and p from the paired
    t test over conversations (``bench.analysis.stats.paired_t_test``, the report's one rule: the CI excludes 0 exactly
    when p < 0.05; NaN with fewer than 2 conversations); NaN for full context itself."""
    from bench.analysis.stats import paired_t_test

    nan = {"j_minus_full": NAN, "j_minus_full_lo": NAN, "j_minus_full_hi": NAN, "p_vs_full": NAN}
    same = ((rows["dataset"] == where["dataset"]) & (rows["embedder"] == where["embedder"])
            & (rows["backend"] == where["backend"]))
    if where["strategy"] == FULL:
        return nan
    a = rows[same & (rows["point"] == where["point"])].set_index("question_id")
    b = rows[same & (rows["strategy"] == FULL)].set_index("question_id")
    common = a.index.intersection(b.index)
    if len(common) == 0:
        return nan
    t = paired_t_test(a.loc[common, "correct"].to_numpy(np.float64), b.loc[common, "correct"].to_numpy(np.float64),
                      clusters=a.loc[common, "conversation_id"].astype(str).to_numpy())
    return {"j_minus_full": t.diff, "j_minus_full_lo": t.ci_low, "j_minus_full_hi": t.ci_high, "p_vs_full": t.p_value}


def _ci(v: float, lo: float, hi: float) -> str:
    if math.isnan(v):
        return "n/a"
    return f"{v:.3f}" + ("" if math.isnan(lo) else f" [{lo:.3f}, {hi:.3f}]")


def markdown(summary: pd.DataFrame, cfg: LLMConfig, *, sample: int, seed: int, fmt: str) -> str:
    """The answers.md section: accuracy vs injected tokens vs dollars per 1,000 questions, full context included."""
    lines = ["## Answer-level metrics (LLM reader and judge)", "",
             f"Reader and judge: `{cfg.model}` (`{cfg.name}`), temperature {cfg.temperature:g}, prompt template "
             f"`{TEMPLATE_VERSION}`; a seeded sample of up to {sample} questions per dataset (seed {seed}), the same "
             f"questions at every point; context rendered in format {fmt}. J = share judged CORRECT by a LoCoMo/mem0-style "
             f"judge; token F1 = SQuAD-normalised token F1 against the gold answer. Adversarial questions (gold: no answer) "
             f"are CORRECT (F1 1) exactly when the reader abstains (\"{ABSTAIN}\"), without a judge call. "
             "[95 % CI] = about the mean of conversations like these (Student t with conversations − 1 df; none with one "
             "conversation). $ / 1k questions = the recorded cost of the reader's calls "
             "(what answering with this context costs) per 1,000 questions, and of reader + judge calls (what this "
             f"evaluation costs), at ${cfg.price_in:g} / ${cfg.price_out:g} per million input / output tokens (check the prices).",
             "", "| dataset | point | n | J [95 % CI] | J answerable | token F1 [95 % CI] | injected tokens | $ / 1k questions (reader) | $ / 1k (reader + judge) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in summary.iterrows():
        lines.append(f"| {md_text(r['dataset'])} | {md_text(r['point'])} | {r['n_questions']} | {_ci(r['accuracy_j'], r['accuracy_j_lo'], r['accuracy_j_hi'])} | "
                     f"{r['accuracy_j_answerable']:.3f} | {_ci(r['token_f1'], r['token_f1_lo'], r['token_f1_hi'])} | "
                     f"{r['injected_tokens']:.0f} | {r['usd_per_1k_questions']:.4f} | {r['eval_usd_per_1k_questions']:.4f} |")
    lines.append("")
    for (ds, emb, be), g in summary.groupby(["dataset", "embedder", "backend"], sort=False):
        full = g[g["strategy"] == FULL]
        if full.empty:
            continue
        f = full.iloc[0]
        for _, r in g[g["strategy"] != FULL].iterrows():
            diff, p = r["j_minus_full"], r["p_vs_full"]
            verdict = ("not significant at 0.05: this sample does not tell them apart" if not p < 0.05 else
                       ("full context answers worse" if diff > 0 else "full context answers better"))
            saved = 1 - r["injected_tokens"] / f["injected_tokens"] if f["injected_tokens"] else NAN
            lines.append(f"- {md_text(ds)}: {md_text(r['point'])} vs full context on the same questions: J {r['accuracy_j']:.3f} vs "
                         f"{f['accuracy_j']:.3f}, difference {_ci(diff, r['j_minus_full_lo'], r['j_minus_full_hi'])}, paired "
                         f"t test over conversations p {p:.3g} ({verdict}); {saved:.0%} fewer injected tokens; "
                         f"${r['usd_per_1k_questions']:.4f} vs ${f['usd_per_1k_questions']:.4f} per 1,000 answers.")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- run directories

def recommended_points(run, job_meta: dict) -> list[Point]:
    """The recommended point of the job's dataset (analysis/recommendation.csv, ``best``) when it was measured by this job."""
    from bench.output import read_csv
    from bench.results.rundir import ANALYSIS

    path = run.path / ANALYSIS / "recommendation.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (run `recallbench report {run.path}` first, or pass --points)")
    rec = read_csv(path)
    best = rec[rec["best"].astype(bool) & (rec["dataset"].astype(str) == str(job_meta.get("dataset")))
               & (rec["embedder"].astype(str) == str(job_meta.get("embedder")))
               & (rec["backend"].astype(str) == str(job_meta.get("backend")))]
    return [Point(str(r.strategy), None if pd.isna(r.threshold) else round(float(r.threshold), 10))
            for r in best.itertuples(index=False)]


def plan_points(run, asked: Sequence[Point] | None) -> list[tuple[object, list[Point]]]:
    """(job, its points) for every finished job of ``run``: each point is answered once per (dataset, embedder,
    store), in the first job that ran its strategy (a multirun over strategies runs each in its own job).
    Default points: the dataset's recommended point and full context. Full context comes from a job's
    ``full_context`` strategy, else from the group's first job (every turn the question may see)."""
    jobs = run.job_dirs()
    groups: dict[tuple, list] = {}
    for job in jobs:
        m = job.meta()
        groups.setdefault((m.get("dataset"), m.get("embedder"), m.get("backend")), []).append(job)
    out: dict[str, list[Point]] = {}
    for members in groups.values():
        wanted = list(asked) if asked else [*recommended_points(run, members[0].meta()), Point(FULL)]
        for p in dict.fromkeys(wanted):
            owner = next((j for j in members if p.strategy in {s["name"] for s in j.strategies()}), None)
            if owner is None and p.strategy == FULL:
                owner = next((j for j in members if any(s.get("kind") == FULL for s in j.strategies())), members[0])
            if owner is None:
                names = sorted({s["name"] for j in members for s in j.strategies()})
                raise ValueError(f"{run.path}: strategy {p.strategy!r} is not in this run (strategies: {', '.join(names)})")
            out.setdefault(str(owner.path), []).append(p)
    return [(j, out[str(j.path)]) for j in jobs if str(j.path) in out]


def build_items(job_dir, points: Sequence[Point], *, sample: int, seed: int, fmt: str = "A") -> list[Item]:
    """The (point, question) items of one finished job: its selections replayed, rendered in ``fmt``."""
    from bench.selection import formats
    from bench.data import tokens
    from bench.analysis.attribution import replay
    from bench.results.rundir import STRATEGIES, load_job
    from bench.strategies.spec import load_specs
    from bench.replay.visibility import Visibility, parse_filter

    job = load_job(job_dir)
    meta = job_dir.meta()
    corpus = job.corpus
    by_key = {t.key: t for t in corpus.turns()}
    specs = {s.name: s for s in load_specs(job.strategies, job.job_dir / STRATEGIES)}
    full_names = [s.name for s in specs.values() if s.kind == FULL]
    traced = {q for tr in job.traces for q in tr.table["question_id"]}
    qs = sample_questions([q for q in corpus.questions if q.question_id in traced], sample, seed)
    token_counts = None
    items: list[Item] = []
    for p in points:
        name = full_names[0] if p.strategy == FULL and p.strategy not in specs and full_names else p.strategy
        if name == FULL and name not in specs:  # the run had no full-context strategy: every turn the question may see
            vis = Visibility(corpus, parse_filter(job.traces[0].meta.get("metadata_filter") if job.traces else None))
            chosen = {q.question_id: vis.visible_turns(q).keys for q in qs}
        else:
            spec = specs.get(name)
            if spec is None:
                raise ValueError(f"{job_dir.path}: strategy {name!r} is not in this run (strategies: {', '.join(specs)})")
            if spec.thresholded and p.threshold is None:
                raise ValueError(f"--points: strategy {name!r} takes a threshold: give {name}@<threshold>")
            if not spec.thresholded and p.threshold is not None:
                raise ValueError(f"--points: strategy {name!r} has no threshold: give {name} without '@'")
            roles = tuple(spec.roles) if spec.roles else None
            trace = next((t for t in job.traces if (tuple(t.meta["roles"]) if t.meta.get("roles") else None) == roles), None)
            if trace is None:
                raise ValueError(f"{job_dir.path}: no trace for strategy {name!r} (roles {roles})")
            if token_counts is None:
                turns = corpus.turns()
                counts = tokens.count_tokens_many([tokens.format_memory(t.role, t.text) for t in turns], job.token_encoding)
                token_counts = {t.key: n for t, n in zip(turns, counts)}
            seen = replay(trace, corpus, [spec], [p.threshold if p.threshold is not None else 0.5], token_counts,
                          embedder=job.embedder)
            chosen = seen.get((spec.name, p.threshold), {})
        for q in qs:
            if q.question_id not in chosen:
                continue
            turns = [by_key[k] for k in chosen[q.question_id]]
            context = formats.render(fmt, turns)
            items.append(Item(str(meta.get("dataset")), str(meta.get("embedder")), str(meta.get("backend")), p, q, context,
                              tokens.count_tokens(context, job.token_encoding) if context else 0))
    return items
