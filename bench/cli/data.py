"""``recallbench data``: ``check <path>`` prints a dataset card with the defect report; ``convert <src>
<out_dir>`` writes any supported corpus in the own format; ``fetch`` verifies the public corpora
against their manifests (and downloads missing ones when online). ``--kind`` is one of locomo,
locomo_2025, longmemeval, longmemeval_oracle, longmemeval_s, own (default: detected from the path). Errors print one
line on stderr and exit with code 2. ``check --strict`` exits 1 when the corpus has any defect, after
printing the card, with the one-line summary ("strict: 3 label defects: ...") on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from bench.cli.common import fail, parser, setup_logging


def kind_choices() -> tuple[str, ...]:
    """``auto`` and every corpus kind (``bench.data.kinds``: read from configs/dataset/)."""
    from bench.data import kinds

    return ("auto", *kinds())



def _parser() -> argparse.ArgumentParser:
    ap = parser("data", "Corpora: check prints a dataset card with the defect report, convert writes the own format, "
                        "fetch verifies (and downloads) the public corpora.",
                examples=["recallbench data check datasets/demo              # card: counts, tokens, label defects",
                          "recallbench data check ~/my-data --strict         # exit 1 on any defect",
                          "recallbench data convert ~/corpora/locomo/locomo10.json ~/my-locomo",
                          "recallbench data fetch --offline                  # verify the corpora under the data path"])
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO)")
    sub = ap.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="print the dataset card and defect report")
    check.add_argument("path")
    check.add_argument("--kind", choices=kind_choices(), default="auto")
    check.add_argument("--strict", action="store_true", help="exit 1 when the corpus has any defect")
    conv = sub.add_parser("convert", help="write a corpus in the own format")
    conv.add_argument("src")
    conv.add_argument("out_dir")
    conv.add_argument("--kind", choices=kind_choices(), default="auto")
    sub.add_parser("fetch", add_help=False, help="verify the public corpora against their manifests; download missing ones "
                                                 "(recallbench data fetch --help)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["fetch"]:  # its own options
        return fetch_main(argv[1:])
    args = _parser().parse_args(argv)
    setup_logging(logging.INFO if args.verbose else logging.WARNING, verbose=args.verbose)
    from bench.data import load_corpus
    from bench.data.card import dataset_card, defect_kinds, defect_summary

    try:
        if args.command == "check":
            corpus = load_corpus(args.kind, args.path)
            print(dataset_card(corpus), end="")
            if args.strict and corpus.defects:
                print(f"strict: {defect_summary(corpus.defects)}", file=sys.stderr)
                return 1
        else:
            from bench.data.own import write_own

            corpus = load_corpus(args.kind, args.src)
            out = write_own(corpus, args.out_dir)
            print(f"wrote {corpus.name}: {len(corpus.conversations)} conversations, {len(corpus.turns())} turns, "
                  f"{len(corpus.questions)} questions -> {out}")
            for kind, n, _ in defect_kinds(corpus):
                print(f"  source defect {kind}: {n} (handled while loading; run `check` on the source for details)")
    except (OSError, ValueError) as e:
        return fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    return 0


def fetch_main(argv: list[str] | None = None) -> int:
    """``recallbench data fetch``: verify the corpora against their manifests; download missing files when online."""
    from bench.data.fetch import (
        EXIT_MISMATCH,
        EXIT_MISSING,
        MANIFEST_DIR,
        TIMEOUT_S,
        default_data_dir,
        exit_code,
        fetch,
        load_manifests,
        report_lines,
    )

    ap = parser("data fetch", "Verify the external corpora against their manifests and download missing files.",
                examples=["recallbench data fetch --offline                  # verify only",
                          "BENCH_DATA_DIR=~/corpora recallbench data fetch --only locomo"])
    ap.add_argument("--data-dir", type=Path, default=None, help="default: env BENCH_DATA_DIR, else ./datasets")
    ap.add_argument("--manifests", type=Path, default=MANIFEST_DIR, help="default: the manifests shipped with recallbench")
    ap.add_argument("--only", action="append", metavar="NAME", help="only this manifest (repeatable)")
    ap.add_argument("--offline", action="store_true", help="verify only; never download")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per download (default 20)")
    args = ap.parse_args(argv)
    setup_logging()
    data_dir = (args.data_dir.resolve() if args.data_dir else default_data_dir())
    try:
        manifests = load_manifests(args.manifests)
    except ValueError as e:
        return fail(str(e))
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in manifests})
        if unknown:
            return fail(f"unknown manifest(s) {', '.join(unknown)}; have {', '.join(m.name for m in manifests)}")
        manifests = [m for m in manifests if m.name in args.only]
    print(f"data dir: {data_dir}")
    statuses = fetch(data_dir, manifests, offline=args.offline, timeout=args.timeout)
    for line in report_lines(statuses, manifests, data_dir):
        print(line)
    code = exit_code(statuses)
    if code == EXIT_MISSING:
        print("some files are missing: download them by hand (URLs above), or run again with network access")
    elif code == EXIT_MISMATCH:
        print("some files do not match their manifest: delete them and run again, or check the source")
    return code
