"""Injection formats A/B/C: exact rendered strings, and token costs that add up to the rendered text."""

import random

import pytest

from bench import formats as F
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
    table = F.token_table([T0, T1], lambda texts: [len(t) for t in texts], separator_tokens=1)
    for f in F.FORMATS:
        assert F.render(f, []) == ""
        assert table.cost(f, []) == 0


def test_costs_add_up_to_the_rendered_text_with_a_character_counter():
    # With "tokens" = characters there are no merges, so the piece sums must equal len(render) exactly.
    turns = [T0, T1, T2, T3]
    table = F.token_table(turns, lambda texts: [len(t) for t in texts], separator_tokens=1)
    assert table.fixed == {"A": 0, "B": 2, "C": len("## Relevant Past Context\n")}
    assert table.per_gap == {"A": 1, "B": 2, "C": 0}
    assert table.anchor["c|s0"] == len("\nFrom session on 8 May 2023:\n")  # 29
    for sel in ([T0], [T2, T0], [T0, T1, T2], [T3, T2, T1, T0]):
        for f in F.FORMATS:
            assert table.cost(f, [t.key for t in sel]) == len(F.render(f, sel)), (f, sel)


def test_unknown_format_is_an_error():
    with pytest.raises(ValueError, match="unknown or empty"):
        F.check_formats(["A", "D"])
    with pytest.raises(ValueError, match="unknown or empty"):
        F.render("json", [T0])
    table = F.token_table([T0], lambda texts: [1] * len(texts), formats=["A"])
    with pytest.raises(ValueError, match="format 'B' was not built"):
        table.cost("B", [T0.key])


def test_tiktoken_costs_match_exact_counts_on_locomo(bench_data_dir):
    path = bench_data_dir / "locomo" / "locomo10.json"
    if not path.is_file():
        pytest.skip(f"{path} absent (set BENCH_DATA_DIR to the directory holding locomo/locomo10.json)")
    from bench import tokens
    from bench.data.locomo import load_locomo

    corpus = load_locomo(path=path)
    table = F.token_table(corpus.turns(), tokens.count_tokens_many)
    rng = random.Random(0)
    gaps = {f: [] for f in F.FORMATS}
    for conv in corpus.conversations:
        for n in (1, 5, 20):
            sel = rng.sample(conv.turns, n)
            for f in F.FORMATS:
                gaps[f].append(table.cost(f, [t.key for t in sel]) - tokens.count_tokens(F.render(f, sel)))
    # measured 2026-11: A within [-1, 0], B exact, C within [0, +1]
    for f, g in gaps.items():
        assert max(abs(x) for x in g) <= 2, (f, g)
