"""The Chinese documentation (README.zh-CN.md, docs/zh/) against the English, and the diagrams.

- Each English page with a Chinese counterpart (PAIRS) names the same commands (`marun <command>`
  and every line of its ```bash blocks), options (`--...`) and variables (`MA_*`, `MARUN_*`,
  `RANK_TABLE_FILE`, ...: upper-case names with an underscore): a flag, variable or command added
  to one language and not to the other fails here. Every Chinese page is either a counterpart or
  listed in ZH_ONLY with why it has none.
- Every ```mermaid block is plausible Mermaid: a known diagram type on its first line, brackets
  and quotes balanced, each line a statement of its type. This is not a renderer: GitHub and
  Gitee draw them; a diagram that passes here can still draw badly.

Every command of these pages also runs as written: tests/cli/test_docs_commands.py reads
README.zh-CN.md and docs/zh/ like the English pages.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO

PAIRS = {
    "README.md": "README.zh-CN.md",
    "docs/engines/ascend.md": "docs/zh/engines/ascend.md",
    "docs/engines/mindspore.md": "docs/zh/engines/mindspore.md",
    "docs/engines/pytorch.md": "docs/zh/engines/pytorch.md",
    "docs/engines/tensorflow.md": "docs/zh/engines/tensorflow.md",
}
ZH_ONLY = {
    "docs/zh/engines/mpi.md": (
        "a quick start; docs/mpi.md is the reference of MPI mode's every part (sshd, the "
        "leader's argv, run_mpi.sh line by line)"
    ),
    "docs/zh/glossary.md": "the platform's terms against marun's: for Chinese readers",
    "docs/zh/migrating.md": "gathers the migration sections of the engine pages and mpi.md",
    "docs/zh/restart-rounds.md": "restart rounds and reading a failure, from supervision.md",
    "docs/zh/custom-images.md": "custom images, from docker/README.md and entrypoints/README.md",
}

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*[a-z0-9]")
VARIABLE = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b")
SUBCOMMAND = re.compile(r"\bmarun (plan|run|simulate|doctor|report|version)\b")


def _bash_lines(text: str) -> set[str]:
    """Each logical line of the ```bash blocks, continuations joined, comments dropped."""
    lines: set[str] = set()
    for block in re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for raw in joined.splitlines():
            line = re.sub(r"\s+#\s.*$", "", raw).strip()
            if line and not line.startswith("#"):
                lines.add(re.sub(r"\s+", " ", line))
    return lines


def names(text: str) -> dict[str, set[str]]:
    return {
        "commands": {f"marun {c}" for c in SUBCOMMAND.findall(text)} | _bash_lines(text),
        "options": set(OPTION.findall(text)),
        "variables": set(VARIABLE.findall(text)),
    }


@pytest.mark.parametrize(("english", "chinese"), sorted(PAIRS.items()))
def test_a_page_and_its_translation_name_the_same_things(english: str, chinese: str) -> None:
    en, zh = names((REPO / english).read_text()), names((REPO / chinese).read_text())
    for kind in en:
        assert en[kind] == zh[kind], (
            f"{kind}: only in {english}: {sorted(en[kind] - zh[kind])}; "
            f"only in {chinese}: {sorted(zh[kind] - en[kind])}"
        )


def test_every_chinese_page_is_a_counterpart_or_says_why_not() -> None:
    pages = {str(p.relative_to(REPO)) for p in (REPO / "docs" / "zh").rglob("*.md")}
    pages.add("README.zh-CN.md")
    assert pages == set(PAIRS.values()) | set(ZH_ONLY)
    for english, chinese in PAIRS.items():  # each links to the other
        assert (REPO / chinese).resolve() in _links(REPO / english), english
        assert (REPO / english).resolve() in _links(REPO / chinese), chinese


def _links(page: Path) -> set[Path]:
    """Where a page's relative Markdown links point."""
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    return {(page.parent / t).resolve() for t in targets if "://" not in t}


def test_the_readme_links_the_chinese_docs_at_its_top() -> None:
    head = (REPO / "README.md").read_text().splitlines()[:5]
    assert any("README.zh-CN.md" in line for line in head)


def test_the_names_are_found() -> None:
    """The extraction itself, on a line of each kind."""
    text = "`MA_NUM_GPUS` and `--init_method` with `marun run`\n"
    found = names(text + "```bash\nmarun plan \\\n  -- x.py  # a comment\n```\n")
    assert found == {
        "commands": {"marun run", "marun plan", "marun plan -- x.py"},
        "options": {"--init_method"},
        "variables": {"MA_NUM_GPUS"},
    }


# --- Mermaid ----------------------------------------------------------------------------------

DOCS = [REPO / "README.md", REPO / "README.zh-CN.md", *sorted((REPO / "docs").rglob("*.md"))]
STATEMENTS = {
    "flowchart": re.compile(
        r"^(?:\w+(?:\[\".*?\"\])?(?:\s*(?:-->|-\.->|-\.-|---|==>|-- \".*?\" -->)\s*"
        r"\w+(?:\[\".*?\"\])?)*|\w+(?:\s*&\s*\w+)*\s*-\.->\s*\w+|subgraph .*|end)$"
    ),
    "sequenceDiagram": re.compile(
        r"^(?:participant \w+(?: as [^;#]+)?|\w+\s*-?->>\s*\w+: [^;#]+|"
        r"Note (?:over|left of|right of) \w+(?:,\s*\w+)?: [^;#]+|autonumber)$"
    ),
    "stateDiagram-v2": re.compile(
        r"^(?:direction (?:LR|TB|RL|BT)|state \".*?\" as \w+ \{|\}|"
        r"(?:\[\*\]|\w+) --> (?:\[\*\]|\w+)(?:: [^;#]+)?)$"
    ),
}


def mermaid_blocks() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in re.finditer(r"^```mermaid\n(.*?)^```", text, re.S | re.M):
            line = text[: m.start()].count("\n") + 1
            found.append((f"{path.relative_to(REPO)}:{line}", m.group(1)))
    return found


BLOCKS = mermaid_blocks()


def test_at_least_six_diagrams_in_each_language() -> None:
    zh = [w for w, _ in BLOCKS if w.startswith(("docs/zh/", "README.zh-CN"))]
    assert len(zh) >= 6 and len(BLOCKS) - len(zh) >= 6, [w for w, _ in BLOCKS]


def _balanced(text: str) -> bool:
    """Brackets outside double quotes balanced; quotes paired."""
    if text.count('"') % 2:
        return False
    outside = re.sub(r'"[^"]*"', '""', text)
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in outside:
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack


@pytest.mark.parametrize(("where", "block"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_a_diagram_is_plausible_mermaid(where: str, block: str) -> None:
    lines = [line.strip() for line in block.splitlines() if line.strip()]
    head = lines[0].split()
    kind = "flowchart" if head[0] in ("flowchart", "graph") else head[0]
    assert kind in STATEMENTS, f"{where}: unknown diagram type {lines[0]!r}"
    if kind == "flowchart":
        assert head[1:] and head[1] in ("LR", "RL", "TB", "TD", "BT"), f"{where}: direction"
    assert _balanced(block), f"{where}: brackets or quotes unbalanced"
    for line in lines[1:]:
        assert STATEMENTS[kind].match(line), f"{where}: not a {kind} statement: {line!r}"


@pytest.mark.parametrize(
    "block",
    [
        "flowhcart LR\n  A --> B\n",  # unknown type
        'flowchart LR\n  A["x] --> B\n',  # quote unbalanced
        "flowchart LR\n  A[x --> B\n",  # bracket unbalanced
        "sequenceDiagram\n  A->>B: one; two\n",  # `;` ends a sequence statement
        "stateDiagram-v2\n  a -> b\n",  # not a transition
    ],
)
def test_the_check_refuses_a_broken_diagram(block: str) -> None:
    with pytest.raises(AssertionError):
        test_a_diagram_is_plausible_mermaid("sample", block)
