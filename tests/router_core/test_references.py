"""Every paper the code cites as ``[KEY]`` resolves to an entry of docs/references.md.

Docstrings cite papers by key (``[CSCR] Eq. 7-8``), as sentence-transformers' losses
name their paper; the bibliography gives title, authors, year and link. A key cited but
not listed, or the old ``paper 00N`` numbering that nothing resolves, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "docs" / "references.md"
CITING_TREES = ("router_core", "gateway", "bench", "docs")
# Bracketed words that are tokens or literals, not citations.
NOT_CITATIONS = {"DONE", "SEP", "CLS", "UNK", "None", "False", "True"}
CITATION = re.compile(r"(?<![\w\]\.\"'\[])\[([A-Z][A-Za-z0-9-]+)\](?![(\[])")
ENTRY = re.compile(r"^- \*\*\[([A-Za-z0-9-]+)\]\*\*", re.MULTILINE)


def _cited_keys() -> dict[str, list[str]]:
    cited: dict[str, list[str]] = {}
    for tree in CITING_TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.suffix not in {".py", ".md"} or path == REFERENCES:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for key in CITATION.findall(line):
                    if key not in NOT_CITATIONS:
                        cited.setdefault(key, []).append(f"{path.relative_to(ROOT)}:{n}")
    return cited


def test_every_cited_key_has_an_entry():
    listed = set(ENTRY.findall(REFERENCES.read_text(encoding="utf-8")))
    cited = _cited_keys()
    assert {"CSCR", "EquiRouter", "DARS", "Prefill"} <= set(cited), sorted(cited)
    missing = {key: where for key, where in cited.items() if key not in listed}
    assert not missing, f"cited but not in docs/references.md: {missing}"


def test_every_entry_has_authors_year_and_link():
    text = REFERENCES.read_text(encoding="utf-8")
    entries = re.split(r"\n(?=- \*\*\[)", text)[1:]
    assert len(entries) >= 4
    for entry in entries:
        key = ENTRY.match(entry).group(1)
        assert re.search(r"\b(19|20)\d\d\b", entry), f"{key}: no year"
        assert "<https://" in entry, f"{key}: no link"
        assert entry.count(",") >= 1 or " and " in entry, f"{key}: no authors"


def test_no_numbered_paper_citations_left():
    numbered = re.compile(r"\bpaper 0\d\d\b")
    hits = [
        f"{path.relative_to(ROOT)}"
        for tree in CITING_TREES
        for path in (ROOT / tree).rglob("*")
        if path.suffix in {".py", ".md"} and numbered.search(path.read_text(encoding="utf-8"))
    ]
    assert not hits, f"cite by [KEY] (docs/references.md), not 'paper 00N': {hits}"
