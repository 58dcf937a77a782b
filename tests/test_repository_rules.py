"""Rules of the repository's shape that a reviewer would otherwise have to remember.

Modules stay small; the README stays a user's page; the product's code and the user's documents
hold no lab notebook (dates, machine names, commit hashes: those belong to benchmarks/); and
every link or ``benchmarks/...`` path they give leads somewhere.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_PACKAGES = ("autotune", "api")
#: The longest a module of the product may grow before it is split along its seams.
MAX_MODULE_LINES = 600
#: The README is a user's page; the rest of the documentation lives in docs/.
MAX_README_LINES = 250

#: Dates, machine and chip names, and core counts: figures of a measurement, kept in benchmarks/.
LAB_NOTEBOOK = re.compile(
    r"20\d\d-\d\d-\d\d|EPYC|Xeon|AMX|AVX-?512|H100|H200|A100|\d+-(v?CPU|core)\b"
)
#: A word of 7 to 40 hex digits with at least one letter and one digit: a commit hash.
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
#: Alembic's revision ids are hex-like words by nature, not citations of a commit.
REVISION_ASSIGNMENT = re.compile(r"^\s*(down_)?revision\s*[:=]")

#: Documents whose relative links must resolve (docs/ is added file by file).
LINKED_DOCUMENTS = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "benchmarks/RESULTS.md")
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
CODE_FENCE = re.compile(r"^\s*(```|~~~)")
BENCHMARKS_PATH = re.compile(r"\bbenchmarks/[\w./-]*")


def product_modules() -> list[Path]:
    return sorted(path for package in CODE_PACKAGES for path in (ROOT / package).rglob("*.py"))


def user_documents() -> list[Path]:
    """README.md and every text file under docs/user and docs/ops."""
    documents = [ROOT / "README.md"]
    for folder in ("docs/user", "docs/ops"):
        documents += sorted(path for path in (ROOT / folder).rglob("*") if path.is_file())
    return [path for path in documents if is_text(path)]


def is_text(path: Path) -> bool:
    try:
        path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError):
        return False
    return True


def where(path: Path, number: int, line: str) -> str:
    return f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"


def is_lab_notebook(line: str) -> bool:
    if LAB_NOTEBOOK.search(line):
        return True
    return not REVISION_ASSIGNMENT.match(line) and COMMIT_HASH.search(line) is not None


def lab_notebook_hits(path: Path) -> Iterator[str]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if is_lab_notebook(line):
            yield where(path, number, line)


def test_no_module_of_the_product_is_over_600_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in product_modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"split these along their seams (at most {MAX_MODULE_LINES} lines):\n" + (
        "\n".join(long)
    )


def test_no_lab_notebook_in_the_code_or_the_user_documents() -> None:
    """Dates, machine names and commit hashes are evidence: they belong in benchmarks/, which a
    comment or a document links to (e.g. ``benchmarks/RESULTS.md``) instead of narrating it."""
    hits = [
        hit for path in [*user_documents(), *product_modules()] for hit in lab_notebook_hits(path)
    ]
    assert not hits, "move these to benchmarks/ and link to it:\n" + "\n".join(hits)


def test_the_readme_is_at_most_250_lines() -> None:
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, (
        f"README.md is {lines} lines (at most {MAX_README_LINES}): move the rest to docs/"
    )


def relative_links(document: Path) -> Iterator[tuple[int, str]]:
    """The line number and target of each link in ``document`` that is a path in this tree."""
    in_code = False
    for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), 1):
        if CODE_FENCE.match(line):
            in_code = not in_code
            continue
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # an inline code span shows syntax, not a link
        targets = MARKDOWN_LINK.findall(line) + HTML_LINK.findall(line)
        targets += REFERENCE_LINK.findall(line)
        for target in targets:
            if not re.match(r"^([a-z][a-z0-9+.-]*:|#|//)", target, re.IGNORECASE):
                yield number, target


def linked_documents() -> list[Path]:
    documents = [ROOT / name for name in LINKED_DOCUMENTS]
    documents += sorted((ROOT / "docs").rglob("*.md"))
    return documents


def test_every_relative_link_in_the_documents_leads_to_a_file() -> None:
    broken = []
    for document in linked_documents():
        if not document.exists():
            broken.append(f"{document.relative_to(ROOT)}: the document is missing")
            continue
        for number, target in relative_links(document):
            path = target.split("#", 1)[0].split("?", 1)[0]
            if path and not (document.parent / path).exists():
                broken.append(f"{document.relative_to(ROOT)}:{number}: {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def comments_and_strings(path: Path) -> Iterator[tuple[int, str]]:
    """Each comment and string literal (docstrings among them) of a module, with its line."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING) or (
            token.type == getattr(tokenize, "FSTRING_MIDDLE", -1)
        ):
            yield token.start[0], token.string


def test_every_benchmarks_path_the_code_cites_exists() -> None:
    missing = []
    for module in product_modules():
        for number, text in comments_and_strings(module):
            for cited in BENCHMARKS_PATH.findall(text):
                path = cited.split("#", 1)[0].rstrip(".,;:")
                if not (ROOT / path).exists():
                    missing.append(f"{module.relative_to(ROOT)}:{number}: {cited}")
    assert not missing, "these benchmarks/ paths do not exist:\n" + "\n".join(missing)
