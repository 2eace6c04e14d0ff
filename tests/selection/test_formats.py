"""Injection formats A/B/C: exact rendered strings, and token costs that add up to the rendered text."""

import random

import numpy as np
import pytest

from bench.selection import formats as F
from bench.types import Turn

MAY8 = 1683554160.0  # 1:56 pm on 8 May 2023 UTC
MAY25 = 1685021400.0  # 1:30 pm on 25 May 2023 UTC

T0 = Turn("c", "D1:1", "user", "Ann", "I adopted a dog.", MAY8, 0, 0)
T1 = Turn("c", "D1:2", "assistant", "Bob", "Nice!", MAY8, 1, 0)
T2 = Turn("c", "D2:1", "user", "Ann", "His name is Rex.", MAY25, 2, 1)
T3 = Turn("c", "D3:1", "user", "Ann", "No date here.", None, 3, 2)


def test_render_a_plain_lines_in_selection_order():
    assert F.render("A", [T2, T0]) == "user: His name is Rex.\nuser: I adopted a dog."


def test_render_b_json_with_dates():
    assert F.render("B", [T0, T3]) == ('[{"role": "user", "content": "I adopted a dog.", "date": "2023-05-08"}, '
                                       '{"role": "user", "content": "No date here."}]')


def test_render_c_sections_in_time_order_with_anchors():
    # selection order T2, T1, T0, T3: C groups by session, sessions in time order (undated last), turns by position
    assert F.render("C", [T2, T1, T0, T3]) == (
        "## Relevant Past Context\n"
        "\nFrom session on 8 May 2023:\n"
        "[turn] user: I adopted a dog.\n"
        "[turn] assistant: Nice!\n"
        "\nFrom session on 25 May 2023:\n"
        "[turn] user: His name is Rex.\n"
        "\nFrom session 3:\n"
        "[turn] user: No date here.\n"
    )


def test_nothing_selected_costs_nothing():
    table = F.token_table([T0, T1], lambda texts: [len(t) for t in texts])
    for f in F.FORMATS:
        assert F.render(f, []) == ""
        assert table.cost(f, []) == 0


def test_costs_add_up_to_the_rendered_text_with_a_character_counter():
    # With "tokens" = characters there are no merges, so the pieces must add up to len(render) exactly.
    turns = [T0, T1, T2, T3]
    table = F.token_table(turns, lambda texts: [len(t) for t in texts])
    # A: line + "\n" for all but the last line; B: '[{"' / ' {"' replace an object's own '{"' (+1 character each),
    # object + "," / + "]"; C: the header with the first anchor's blank line, anchors without it
    assert table.fixed == {"A": 0, "B": 1, "C": len("## Relevant Past Context\n\n")}
    assert table.per_gap == {"A": 0, "B": 1, "C": 0}
    assert table.joined["A"][T0.key] == len("user: I adopted a dog.\n") and table.last["A"][T0.key] == len("user: I adopted a dog.")
    assert table.anchor[T0.key] == len("From session on 8 May 2023:\n")  # 28
    for sel in ([T0], [T2, T0], [T0, T1, T2], [T3, T2, T1, T0], [T1, T3, T0]):
        for f in F.FORMATS:
            assert table.cost(f, [t.key for t in sel]) == len(F.render(f, sel)), (f, sel)


def test_c_anchor_and_section_order_follow_the_selection():
    # session 4: its first turn is dated 24 June 2023, its second 29 March 2023. C anchors a section with the date
    # of its first selected turn (by position) and orders sections by their earliest selected turn, so with both
    # turns selected session 4 comes before 8 May under "24 June"; with only the first, after 25 May.
    late = Turn("c", "D4:1", "user", "Ann", "Later.", MAY25 + 86400 * 30, 4, 3)
    early = Turn("c", "D4:2", "assistant", "Bob", "Earlier?", MAY8 - 86400 * 40, 5, 3)
    assert F.render("C", [T2, early, late, T0]).startswith("## Relevant Past Context\n\nFrom session on 24 June 2023:\n[turn] user: Later.\n")
    assert F.render("C", [late, T2]).endswith("\nFrom session on 24 June 2023:\n[turn] user: Later.\n")
    turns = [T0, T1, T2, T3, late, early]
    table = F.token_table(turns, lambda texts: [len(t) for t in texts])  # characters: every piece and boundary shows
    for sel in ([T2, early, late, T0], [late, T2], [early, T3], [T3, early, T1, late], [early], turns):
        for f in F.FORMATS:
            assert table.cost(f, [t.key for t in sel]) == len(F.render(f, sel)), (f, [t.turn_id for t in sel])


def test_unknown_format_is_an_error():
    with pytest.raises(ValueError, match="unknown or empty"):
        F.check_formats(["A", "D"])
    with pytest.raises(ValueError, match="unknown or empty"):
        F.render("json", [T0])
    table = F.token_table([T0], lambda texts: [1] * len(texts), formats=["A"])
    with pytest.raises(ValueError, match="format 'B' was not built"):
        table.cost("B", [T0.key])


def test_the_table_is_counted_in_chunks_with_the_same_counts(monkeypatch):
    # a character counter; CHUNK 2 over four turns: every call of count_many gets at most 2 pieces, the table is unchanged
    whole = F.token_table([T0, T1, T2, T3], lambda texts: [len(x) for x in texts])
    monkeypatch.setattr(F, "CHUNK", 2)
    sizes = []
    chunked = F.token_table([T0, T1, T2, T3], lambda texts: sizes.append(len(texts)) or [len(x) for x in texts])
    assert max(sizes) == 3  # the pieces 2 at a time; 3: the fixed B pieces, and the three distinct C anchors
    assert sizes.count(2) == 2 * (2 + 3 + 2)  # two chunks x (A: alone, joined; B: alone, joined, last; C: alone, joined)
    assert chunked.memory == whole.memory and chunked.joined == whole.joined and chunked.last == whole.last
    assert chunked.c_info == whole.c_info and chunked.anchor == whole.anchor and chunked.unsafe_a == whole.unsafe_a
    assert chunked.memory["A"][T1.key] == len("assistant: Nice!") == 16 and chunked.joined["A"][T1.key] == 17


ENCODINGS = ("cl100k_base", "o200k_base")


def _exact(enc):
    from bench.data import tokens

    return lambda text: tokens.count_tokens(text, enc)


def _counter(enc):
    from bench.data import tokens

    return lambda texts: tokens.count_tokens_many(texts, enc)


def test_format_a_is_the_count_of_the_joined_lines_hand_worked():
    # cl100k: "user: hello world" = 882 25 24748 1917 (4); "user: I went hiking." = 882 25 358 4024 38464 13 (6).
    # A newline after a letter is its own token (198); after "." it merges (".\n" = 627). So the order matters:
    hello = Turn("c", "h", "assistant", "Bob", "hello world", None, 0)
    hike = Turn("c", "k", "user", "Ann", "I went hiking.", None, 1)
    table = F.token_table([hello, hike], _counter("cl100k_base"))
    assert table.cost("A", [hello.key, hike.key]) == 4 + 1 + 6 == 11  # "assistant: hello world\nuser: I went hiking."
    assert table.cost("A", [hike.key, hello.key]) == 6 + 0 + 4 == 10  # "user: I went hiking.\nassistant: hello world"
    assert table.memory["A"][hello.key] + table.memory["A"][hike.key] == 10  # the old per-line sum: 1 short for the first order


# Lines with endings that a tokenizer might merge across a newline, a JSON separator or a section break.
TRICKY = [
    "hello world", "I went hiking.", "Nice!", "trailing spaces   ", "tab at the end\t", "ends with a newline\n",
    "two newlines\n\n", "windows line\r\n", "carriage\r", "inner\nnewline then a letter", "inner\n\n  indented\n ",
    "", "   leading spaces", "\nleading newline", "数字123", "我擅长什么？", "我今天去了超市买了很多水果和蔬菜。", "日本語",
    "emoji 👋", "🌍", "mixed 😀!", "family 👨‍👩‍👧", "quote at the end \"", "backslash \\", "brace }", 'json-ish {"a": [1, 2]}',
    "url https://example.com/", "path /usr/bin/", "it's", "ends with 's", "<|endoftext|>", "```code```\n", "12345",
    "…", "dash —", "'", "‘curly’", "Ünïcödé", "combining e\u0301", "\u00a0nbsp\u00a0", "a/", "/", "x\n/y", "?!\n\n",
]


def _tricky_turns():
    # three sessions, both roles: session 1's turns a day apart going forward, session 2's going backward (so
    # which section comes first, and the date of its anchor, depend on the selection), session 3 undated
    out = []
    for i, text in enumerate(TRICKY):
        session = i % 3
        ts = (MAY8 + 86400 * i, MAY8 + 86400 * (len(TRICKY) - i), None)[session]
        out.append(Turn("c", f"D{session + 1}:{i}", ("user", "assistant")[i % 2], "x", text, ts, i, session))
    return out


@pytest.mark.parametrize("enc", ENCODINGS)
def test_costs_equal_tiktoken_on_hand_made_lines_with_tricky_endings(enc):
    turns = _tricky_turns()
    table = F.token_table(turns, _counter(enc))
    exact = _exact(enc)
    assert not table.unsafe_a  # every line starts with its role: the fast formula applies everywhere
    rng = random.Random(7)
    sels = [[a, b] for a in turns for b in turns if a is not b]  # every ordered pair: every boundary
    sels += [rng.sample(turns, rng.choice([3, 5, 9, len(turns)])) for _ in range(200)]
    for sel in sels:
        for f in F.FORMATS:
            assert table.cost(f, [t.key for t in sel]) == exact(F.render(f, sel)), (enc, f, [t.text for t in sel])
    # the fast formula of format A, written out: line + "\n" for every line but the last, then the last line
    for sel in sels[:500]:
        lines = [F.line_a(t) for t in sel]
        assert sum(exact(x + "\n") for x in lines[:-1]) + exact(lines[-1]) == exact("\n".join(lines))


def test_a_line_that_does_not_start_with_a_letter_is_counted_exactly():
    # a role starting with a newline would merge with the newline before it ("\n\n" is one cl100k token):
    # the per-line formula is 1 token off there, so such lines are priced by counting the rendered text
    odd = Turn("c", "o", "\nuser", "x", "hi", None, 1)
    first = Turn("c", "f", "user", "x", "hello world", None, 0)
    table = F.token_table([first, odd], _counter("cl100k_base"))
    assert table.unsafe_a == {odd.key}
    exact = _exact("cl100k_base")
    text = F.render("A", [first, odd])  # "user: hello world\n\nuser: hi"
    formula = exact("user: hello world\n") + exact("\nuser: hi")
    assert formula == exact(text) + 1
    assert table.cost("A", [first.key, odd.key]) == exact(text)
    assert table.cost("A", [odd.key, first.key]) == exact(F.render("A", [odd, first]))  # first position: formula holds


def _corpus_or_skip(bench_data_dir):
    path = bench_data_dir / "locomo" / "locomo10.json"
    if not path.is_file():
        pytest.skip(f"{path} absent (set BENCH_DATA_DIR to the directory holding locomo/locomo10.json)")
    from bench.data.locomo import load_locomo

    return load_locomo(path=path)


@pytest.mark.slow
@pytest.mark.parametrize("enc", ENCODINGS)
def test_tiktoken_costs_match_exact_counts_on_locomo(bench_data_dir, enc):
    corpus = _corpus_or_skip(bench_data_dir)
    table = F.token_table(corpus.turns(), _counter(enc))
    exact = _exact(enc)
    assert not table.unsafe_a
    rng = random.Random(0)
    checked = 0
    for conv in corpus.conversations:
        sels = [list(conv.turns)] + [rng.sample(conv.turns, n) for n in (1, 2, 3, 5, 10, 20, 60) for _ in range(6)]
        for sel in sels:
            lines = [F.line_a(t) for t in sel]
            joined = exact("\n".join(lines))
            # the fast formula, written out, and the table, against tiktoken's count of the joined string
            assert sum(exact(x + "\n") for x in lines[:-1]) + exact(lines[-1]) == joined
            assert table.cost("A", [t.key for t in sel]) == joined
            for f in ("B", "C"):
                assert table.cost(f, [t.key for t in sel]) == exact(F.render(f, sel)), (enc, f, conv.conversation_id, len(sel))
            checked += 1
    assert checked == 10 * 43


def test_c_prefix_costs_hand_worked():
    # memories 0..3: sessions 0 (positions 0, 1) and 1 (positions 2, 3); fixed 100
    arrays = {"tok": [10, 20, 30, 40], "anchor": [5, 6, 7, 8], "brk": [1, 2, 3, 4], "pos": [0, 1, 2, 3], "section": [0, 0, 1, 1]}
    kw = {k: np.array(v) for k, v in arrays.items()}
    rows = np.array([[3, 0, 1, 2], [2, 1, 0, 0], [0, 0, 0, 0]])
    got = F.c_prefix_costs(rows=rows, n_hits=np.array([4, 2, 0]), fixed=100, **kw)
    # row 0: {3}: 100 + 40 + anchor of 3 (8) = 148; {3, 0}: + 10, anchor of 0 (5), break of session 0's last (0: 1) = 164;
    # {3, 0, 1}: + 20, session 0 now ends with 1 (break 2) = 185; all: + 30, session 1 now opens with 2 (anchor 7) = 214
    assert got[0].tolist() == [0, 148, 164, 185, 214]
    # row 1: {2}: 100 + 30 + 7 = 137; {2, 1}: + 20 + anchor 6 + break of 1 (2), session 0 sorts first = 165
    assert got[1, :3].tolist() == [0, 137, 165] and got[2, 0] == 0


def test_c_prefix_costs_equal_the_table_and_c_sections_hand_worked():
    day = 86400.0
    turns = [Turn("c", f"t{i}", ("user", "assistant")[i % 2], "s", f"line {i}" + "!" * i, MAY8 + day * (i // 3), i, i // 3) for i in range(9)]
    # d: session 1 is earlier than session 0 (sections sort by time: 1 then 0); e: its sessions overlap in time (one by one)
    turns += [Turn("d", "u0", "user", "s", "late", MAY25, 0, 0), Turn("d", "u1", "user", "s", "early", MAY8, 1, 1),
              Turn("d", "u2", "user", "s", "later", MAY25 + day, 2, 0)]
    turns += [Turn("e", "v0", "user", "s", "a", MAY8, 0, 0), Turn("e", "v1", "user", "s", "b", MAY8 + day, 1, 1),
              Turn("e", "v2", "user", "s", "c", MAY8 + 2 * day, 2, 0)]
    table = F.token_table(turns, lambda texts: [len(t) for t in texts])
    keys = [t.key for t in turns]
    tok, anchor, brk, pos, section, ordered = F.c_sections(table, keys)
    assert section.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 4, 3, 4, 5, 6, 5] and ordered.tolist() == [True] * 12 + [False] * 3
    assert pos.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 0, 1, 2] and tok[0] == len("[turn] user: line 0\n")
    rng = random.Random(3)
    sel = [rng.sample(range(9), rng.randint(0, 9)) for _ in range(40)] + [rng.sample(range(9, 12), rng.randint(0, 3)) for _ in range(12)]
    rows = np.zeros((len(sel), 9), dtype=np.int64)
    for i, s in enumerate(sel):
        rows[i, : len(s)] = s
    got = F.c_prefix_costs(rows=rows, n_hits=np.array([len(s) for s in sel]), fixed=table.fixed["C"], tok=tok, anchor=anchor, brk=brk,
                           pos=pos, section=section)
    for i, s in enumerate(sel):
        for n in range(len(s) + 1):
            assert got[i, n] == table.cost("C", [keys[j] for j in s[:n]]), (s, n)
