"""Keyword baseline, BM25 and reciprocal rank fusion on hand-worked texts."""

import pytest

from bench.strategies import lexical as L
from bench.types import Hit, Question, Turn
from bench.replay.visibility import Memories


def turn(i, text):
    return Turn("c", f"t{i}", "user", "u", text, None, i)


ELIGIBLE = (
    turn(0, "I adopted a dog named Rex."),        # dog
    turn(1, "The weather is nice today."),        # nothing
    turn(2, "Rex loves the park and the beach."),  # park
    turn(3, "My cat sleeps all day."),            # nothing
    turn(4, "We walked the DOG in the park."),    # dog, park (upper case)
    turn(5, "Dogma is a film."),                  # "dog" as a substring of "dogma"
)


def q(text):
    return Question("q", "c", text, None, ())


def ids(hits):
    return [h.id for h in hits]


def test_words_lowercase_stopwords_and_cjk_bigrams():
    assert L.words("Where does Rex play?") == ["rex", "play"]  # "where", "does" are stopwords
    assert L.words("Where does Rex play?", stopwords=False) == ["where", "does", "rex", "play"]
    assert L.words("我擅长Rust") == ["我擅", "擅长", "rust"]  # CJK run -> bigrams, then the latin rest
    assert L.words("我") == ["我"]
    assert L.query_words("The dog, the DOG and a cat") == ("dog", "cat")  # distinct, first-seen order
    assert L.query_words("Is it ok?") == ()  # everything dropped (stopwords, < 3 letters)


def test_keyword_most_recent_first_substring_limit():
    # query words: "dog", "park" -> matches t5 ("dogma" contains "dog"), t4 (both), t2 (park), t0 (dog)
    out = L.keyword((), question=q("Where is the dog park?"), eligible=ELIGIBLE, k=5)
    assert ids(out) == ["c|t5", "c|t4", "c|t2", "c|t0"]
    assert [h.score for h in out] == [1.0, 2.0, 1.0, 1.0]  # distinct query words found
    assert ids(L.keyword((), question=q("Where is the dog park?"), eligible=ELIGIBLE, k=2)) == ["c|t5", "c|t4"]
    assert L.keyword((), question=q("Is it?"), eligible=ELIGIBLE) == ()  # no query words: nothing
    assert L.keyword((), question=q("zebra"), eligible=ELIGIBLE) == ()


def test_keyword_ignores_store_hits_and_threshold():
    a = L.keyword([Hit("c|t1", 0.99)], question=q("dog"), eligible=ELIGIBLE, threshold=0.9, k=1)
    assert ids(a) == ["c|t5"]


def test_bm25_ranks_rare_terms_higher():
    # "rex" occurs in t0 and t2; "beach" only in t2, so t2 must win for "Rex beach"; t0 second; nothing else scores
    out = L.bm25((), question=q("Rex beach"), eligible=ELIGIBLE, k=5)
    assert ids(out) == ["c|t2", "c|t0"]
    assert out[0].score > out[1].score > 0
    assert L.bm25((), question=q("zebra"), eligible=ELIGIBLE) == ()
    assert L.bm25((), question=q("Rex"), eligible=(), k=5) == ()


def test_bm25_scores_match_the_library():
    from rank_bm25 import BM25Okapi

    docs = [L.words(t.text) for t in ELIGIBLE]
    expected = BM25Okapi(docs).get_scores(["rex", "beach"])
    out = {h.id: h.score for h in L.bm25((), question=q("Rex beach"), eligible=ELIGIBLE, k=10)}
    assert out["c|t2"] == pytest.approx(expected[2])
    assert out["c|t0"] == pytest.approx(expected[0])


def test_fuse_reciprocal_rank_hand_worked():
    # k_rrf = 60: a is 1st and 2nd -> 1/61 + 1/62; b is 2nd and 1st -> same (tie: first seen wins); c 3rd in one list
    out = L.fuse([["a", "b", "c"], ["b", "a"]], k_rrf=60)
    assert ids(out) == ["a", "b", "c"]
    assert out[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert out[2].score == pytest.approx(1 / 63)
    # k_rrf = 0: d is first in one list (1.0) and beats e at 2nd+1st... e: 1/2 + 1/1 = 1.5 > d 1.0
    assert ids(L.fuse([["d", "e"], ["e"]], k_rrf=0)) == ["e", "d"]


def test_rrf_fuses_store_hits_and_bm25():
    hits = [Hit("c|t3", 0.9), Hit("c|t1", 0.8), Hit("c|t2", 0.2)]
    # vector ranks: t3 1, t1 2, t2 3; BM25 ranking for "Rex beach": t2 1, t0 2
    # t2: 1/63 + 1/61 = 0.03227; t3: 1/61 = 0.01639; t1: 1/62 = 0.01613; t0: 1/62 = 0.01613 (t1 seen first)
    out = L.rrf(hits, question=q("Rex beach"), eligible=ELIGIBLE, k=3)
    assert ids(out) == ["c|t2", "c|t3", "c|t1"]
    assert out[0].score == pytest.approx(1 / 63 + 1 / 61)
    # with a threshold only t3 and t1 (>= 0.5) are in the vector ranking: t2 keeps only its BM25 share 1/61
    out = L.rrf(hits, question=q("Rex beach"), eligible=ELIGIBLE, threshold=0.5, k=4)
    assert ids(out) == ["c|t3", "c|t2", "c|t1", "c|t0"]


@pytest.mark.parametrize("fn", [L.keyword, L.bm25, L.rrf])
def test_negative_k_is_an_error(fn):
    with pytest.raises(ValueError, match="k must be >= 0"):
        fn((), question=q("dog"), eligible=ELIGIBLE, k=-1)


def test_bm25_and_rrf_keep_no_state_between_calls():
    # interleaving two conversations' eligible memories (as the sweep does across strategies) gives each call
    # the answer it gets alone: nothing is remembered from the previous call's memories
    other = (turn(0, "Rex the parrot talks."), turn(1, "Beach day!"), turn(2, "Nothing here."))  # same keys, other texts
    alone = [ids(L.bm25((), question=q("Rex beach"), eligible=e, k=3)) for e in (ELIGIBLE, other)]
    # ELIGIBLE: t2 has both words, t0 "Rex"; other: one word each, the shorter t1 (2 words) before t0 (3 words)
    assert alone == [["c|t2", "c|t0"], ["c|t1", "c|t0"]]
    for _ in range(2):
        for e, want in zip((ELIGIBLE, other, list(ELIGIBLE), Memories(other), Memories(ELIGIBLE)), alone * 2 + alone[:1]):
            assert ids(L.bm25((), question=q("Rex beach"), eligible=e, k=3)) == want
            assert ids(L.rrf((), question=q("Rex beach"), eligible=e, k=3)) == want  # no vector hits: BM25's order
    mutable = [n for n, v in vars(L).items() if not n.startswith("__") and (isinstance(v, (list, dict, set)) or
                                                                           (n.startswith("_") and isinstance(v, tuple)))]
    assert mutable == []  # no module-level memo (the old _LAST); lru_caches of pure functions of their arguments only


def test_bm25_haystack_ranks_every_memory_zero_scores_in_conversation_order():
    # "Rex beach": t2 (rex + beach) then t0 (rex) score > 0; the other four score 0 and follow in conversation order
    out = L.bm25_haystack(q("Rex beach"), ELIGIBLE)
    assert out == ["c|t2", "c|t0", "c|t1", "c|t3", "c|t4", "c|t5"]
    assert out[:2] == ids(L.bm25((), question=q("Rex beach"), eligible=ELIGIBLE, k=5))  # the strategy's top is its head
    assert L.bm25_haystack(q("zebra"), ELIGIBLE) == [t.key for t in ELIGIBLE]  # nothing scores: conversation order
    assert L.bm25_haystack(q("Is it?"), ELIGIBLE) == [t.key for t in ELIGIBLE]  # no query words
    assert L.bm25_haystack(q("Rex"), Memories(ELIGIBLE)) == ["c|t0", "c|t2", "c|t1", "c|t3", "c|t4", "c|t5"]  # tie: t0 first


def test_haystack_rankers_only_bm25_one_per_parameters():
    from functools import partial

    from bench.strategies.spec import StrategySpec

    def spec(name, fn, roles=None, **kw):
        return StrategySpec(name, partial(fn, **kw), thresholded=False, uses_store=False, roles=roles)

    specs = [spec("bm25_5", L.bm25, k=5, k1=1.5, b=0.75), spec("bm25_10", L.bm25, k=10, k1=1.5, b=0.75),  # k only cuts: one ranking
             spec("bm25_b0", L.bm25, k=5, k1=1.5, b=0.0), spec("bm25_user", L.bm25, roles=("user",), k=5),
             spec("keyword5", L.keyword, k=5), spec("rrf5", L.rrf, k=5)]  # a match filter / the store's ranking: none
    got = L.haystack_rankers(specs)
    assert [(r.name, r.system, r.roles) for r in got] == [("bm25", "bm25 (rank-bm25 Okapi k1=1.5 b=0.75)", None),
                                                          ("bm25_k1-1.5_b-0", "bm25 (rank-bm25 Okapi k1=1.5 b=0)", None),
                                                          ("bm25_user", "bm25 (rank-bm25 Okapi k1=1.5 b=0.75)", ("user",))]
    assert got[0].rank(q("Rex beach"), ELIGIBLE)[:2] == ["c|t2", "c|t0"]


def test_haystack_rankings_see_the_job_s_metadata_filter():
    """BM25's whole-haystack ranking ranks only what the job's metadata filter lets a question see (as the store's trace)."""
    from bench.replay.visibility import parse_filter
    from bench.strategies.lexical import bm25_haystack, haystack_rankings
    from bench.types import Conversation, Corpus, Question, Turn

    def turn(i, project):
        return Turn("c", f"t{i}", "user", "user", f"cat {i}", None, i, metadata=(("project", project),))

    corpus = Corpus("tiny", (Conversation("c", (turn(0, "alpha"), turn(1, "beta"), turn(2, "alpha"))),),
                    (Question("q", "c", "cat", None, ("t1",)),))
    assert haystack_rankings(corpus, bm25_haystack)["q"] == ["c|t0", "c|t1", "c|t2"]  # ties: conversation order
    assert haystack_rankings(corpus, bm25_haystack, metadata=parse_filter({"project": "alpha"}))["q"] == ["c|t0", "c|t2"]
