"""The package's rules, checked on the source: imports go one way (inputs <- plan <- runtime; mpi,
job and sim use them, never the reverse), and every subpackage says what it holds and may import.

Every `import` counts, also those inside functions and under TYPE_CHECKING: a lazy import is
still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "src" / "marun"
# Top-level modules every part may use; they import none of the parts.
HELPERS = {"errors", "exit_codes", "_files", "redact", "log"}
# part -> the parts it may import (besides itself and the helpers).
ALLOWED: dict[str, set[str]] = {
    "helpers": set(),
    "inputs": set(),
    "plan": {"inputs"},
    # the job's progress read from the ranks' output: pure, no part of marun
    "progress": set(),
    "runtime": {"inputs", "plan", "progress"},
    "mpi": {"inputs", "plan", "runtime"},
    # the per-node checks and the ring probe; the arrival barrier (job) and doctor run them
    "preflight": {"inputs", "plan"},
    "job": {"inputs", "plan", "runtime", "preflight", "progress"},
    # The composition root: inputs -> plan -> the job's link -> runtime, every planner by name.
    "launch": {"inputs", "plan", "runtime", "mpi", "job", "preflight"},
    "sim": {"inputs", "plan", "runtime", "mpi", "job", "launch", "run_argv"},
    "doctor": {"inputs", "plan", "runtime", "mpi", "job", "launch", "preflight"},
    # the `marun` command: typer's commands, the options they share, the console script
    "command": {
        "inputs",
        "plan",
        "runtime",
        "mpi",
        "job",
        "sim",
        "doctor",
        "run_argv",
        "launch",
        "report",
        "preflight",
    },
    # `marun report`: reads the files a job wrote (job.json, result.json, events), no code of it
    "report": set(),
    # `marun run`'s start path: a hand parser (run_argv) and launch, typer only when unsure
    "run_argv": set(),
    "__main__": {"command"},
    "__init__": set(),
}


def _part(module: str) -> str:
    """`marun.plan.modes.ascend` -> `plan`; `marun.errors` -> `helpers`."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__version__":
        return "__init__"
    return "helpers" if parts[1] in HELPERS else parts[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    names = list(rel.parts)
    if names[-1] == "__init__":
        names.pop()
    return ".".join(names)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("marun")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "marun":
                found += [(node.lineno, f"marun.{a.name}") for a in node.names]
            elif node.module.startswith("marun."):
                found.append((node.lineno, node.module))
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_no_import_by_name() -> None:
    """No `import_module("marun...")` / `__import__`: an import the rules below cannot see."""
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                assert name not in ("import_module", "__import__"), (
                    f"{path}:{node.lineno}: import by name; import it for real"
                )


def test_no_relative_imports() -> None:
    """Absolute imports only, so that the rules below see every edge."""
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: relative import"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_one_way(path: Path) -> None:
    me = _part(_module_name(path))
    assert me in ALLOWED, f"{path}: a new part of the package; add it to ALLOWED and the docs"
    allowed = ALLOWED[me] | {me, "helpers", "__init__"}
    for line, target in _imports(path):
        them = _part(target)
        assert them in allowed, (
            f"{path.relative_to(PACKAGE)}:{line}: {me} imports {target} ({them}); "
            f"{me} may import only {sorted(allowed)}"
        )


SUBPACKAGES = sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))


@pytest.mark.parametrize("pkg", SUBPACKAGES, ids=lambda p: p.name)
def test_every_subpackage_says_what_it_holds_and_may_import(pkg: Path) -> None:
    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text(encoding="utf-8")))
    assert doc and "May import" in doc, f"{pkg}/__init__.py: say what it holds and may import"


def test_nothing_is_imported_by_the_package_itself() -> None:
    """`import marun` costs nothing: `marun run` sits in front of every training process."""
    for init in [PACKAGE / "__init__.py", *(p / "__init__.py" for p in SUBPACKAGES)]:
        assert _imports(init) == [], f"{init}: imports at package import time"


# Sizes a newcomer can read (part 12), held in every module of the package.
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


@pytest.mark.parametrize(
    "path",
    SOURCES,  # every module of the package
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_modules_and_functions_stay_small(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{path}: split it along a seam"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            where = f"{path}:{node.lineno}: {node.name}"
            assert length <= MAX_FUNCTION_LINES, f"{where}, {length} lines"


def _graph() -> dict[str, set[str]]:
    """module -> the modules of marun it imports (lazy ones too), as far as they are modules."""
    names = {_module_name(p) for p in SOURCES}
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        targets = set()
        for _, imported in _imports(path):
            target = imported
            while target not in names and "." in target:
                target = target.rsplit(".", 1)[0]  # `from marun.x import name`: module marun.x
            if target in names:
                targets.add(target)
        graph[_module_name(path)] = targets - {_module_name(path)}
    return graph


def test_no_import_circle_through_the_plan_floor() -> None:
    """No module of inputs/, plan/ or launch imports, directly or not, one that imports it
    back (the plan value, its coordination section and the planners once made a circle)."""
    graph = _graph()
    for start in graph:
        if _part(start) not in ("inputs", "plan", "launch"):
            continue
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            module = todo.pop()
            assert module != start, f"{start} imports itself back through {sorted(seen)}"
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))


def test_the_supervisors_parts_never_import_it() -> None:
    """The node's supervisor composes its parts (its state, the stop, the rounds, the report):
    they import the state and one another one way, never the supervisor (no circle, no base
    class), directly or not. `from marun.runtime import supervisor` counts too."""
    names = {_module_name(p): p for p in SOURCES}

    def imported(module: str) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(names[module].read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        return found & set(names)

    top = "marun.runtime.supervisor"
    for part in ("node_state", "node_stop", "node_machine", "node_report"):
        seen: set[str] = set()
        todo = [f"marun.runtime.{part}"]
        while todo:
            module = todo.pop()
            assert module != top, f"marun.runtime.{part} imports the supervisor"
            if module not in seen:
                seen.add(module)
                todo.extend(imported(module))


# One owner per derived fact (part 12): where a fact is derived from the platform or a number
# bound is written, it is written once; everything else asks the owner. What is looked for:
# a string constant that is the fact (not a docstring or a message quoting it), a number, or a
# call that derives it.
OWNERS: dict[str, tuple[str, str]] = {
    # fact: (its owner, module path under marun/)
    "the ssh key's file name (id_rsa)": ("SSH_KEY", "inputs/injected.py"),
    "the ssh directory (~/.ssh)": ("Platform.ssh_dir", "inputs/injected.py"),
    "the run directory ($TMPDIR/marun-<uid>)": ("Platform.run_dir", "inputs/injected.py"),
    "the user's passwd entry (login name, home)": ("Platform.passwd", "inputs/injected.py"),
    "the TCP port bound (65535)": ("PORT_MIN, PORT_MAX", "inputs/numbers.py"),
    "the longest wait (a year: 31,536,000 s)": ("MAX_SECONDS", "inputs/numbers.py"),
    "the job token's variable (MARUN_JOB_TOKEN)": ("TOKEN_VAR", "plan/coordination.py"),
    "an exit code by number (124, 126, 127, 128+N)": ("*_EXIT", "exit_codes.py"),
}


def _derivations(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, fact) for each place in `tree` that derives one of OWNERS' facts itself."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    # 128 is an exit code only as 128 + N (MAX_THREADS = 128 is not one)
    added = {
        id(side)
        for node in ast.walk(tree)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
        for side in (node.left, node.right)
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            value = node.value
            if value in ("id_rsa", "id_rsa.pub"):
                found.append((line, "the ssh key's file name (id_rsa)"))
            elif value == ".ssh":
                found.append((line, "the ssh directory (~/.ssh)"))
            elif value == "MARUN_JOB_TOKEN":
                found.append((line, "the job token's variable (MARUN_JOB_TOKEN)"))
            elif value in (31_536_000, 31_536_000.0) and type(value) is not bool:
                found.append((line, "the longest wait (a year: 31,536,000 s)"))
            elif (isinstance(value, str) and "65535" in value) or value == 65535:
                found.append((line, "the TCP port bound (65535)"))
            elif type(value) is int and (
                value in (124, 126, 127) or (value == 128 and id(node) in added)
            ):
                found.append((line, "an exit code by number (124, 126, 127, 128+N)"))
        elif isinstance(node, ast.JoinedStr):
            parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
            if any(str(p).endswith("marun-") for p in parts):
                found.append((line, "the run directory ($TMPDIR/marun-<uid>)"))
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in ("getpwuid", "expanduser"):
                found.append((line, "the user's passwd entry (login name, home)"))
    return found


def test_one_owner_per_derived_fact() -> None:
    """The ssh key and directory, the run directory, the passwd entry, the port bound, the job
    token's name and the exit codes are each derived in one module; the others import it.
    (Before part 12 the ssh key's path was derived in five places, the run directory in two,
    the port bound in four.)"""
    owner_of = {fact: where for fact, (_, where) in OWNERS.items()}
    wrong = []
    for path in SOURCES:
        rel = str(path.relative_to(PACKAGE))
        for line, fact in _derivations(ast.parse(path.read_text(encoding="utf-8"))):
            if rel != owner_of[fact]:
                wrong.append(
                    f"{rel}:{line}: derives {fact}; ask {OWNERS[fact][0]} ({owner_of[fact]})"
                )
    assert wrong == [], "\n".join(wrong)


def test_the_owner_check_sees_a_second_derivation() -> None:
    """The check above finds each kind of derivation it looks for (it would pass vacuously
    otherwise)."""
    source = """
import os, pwd
KEY = "id_rsa"
home = os.path.join(os.path.expanduser("~"), ".ssh")
run = f"/tmp/marun-{os.getuid()}"
ok = 1 <= port <= 65535
token = env.get("MARUN_JOB_TOKEN")
code = 128 + signum
longest = 31_536_000
"""
    facts = {fact for _, fact in _derivations(ast.parse(source))}
    assert facts == set(OWNERS), set(OWNERS) - facts
