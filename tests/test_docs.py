"""Every code block of README.md and docs/*.md runs as written.

Each document's blocks run in order, each in a child process of its own (so a block has
its own imports and data, and a later block sees only the files an earlier one wrote), in
a fresh folder holding a copy of `examples/`. A `python` block must exit 0. In a `console`
block every `$ ` line is a command: it must exit 0, unless the lines shown after it hold
`error:`, in which case it must fail with exactly that error line. `bash` blocks run as
scripts. Output blocks (no language, `json`, `text`) are not run.

An HTML comment on the line before a block changes what happens to it:
- `<!-- docs-test: skip REASON -->` does not run it (the test says why);
- `<!-- docs-test: requires MODULE -->` skips it when MODULE cannot be imported (an extra);
- `<!-- docs-test: write FILE -->` saves a `python` block as FILE in the folder (a file the
  text asks the reader to save), then runs it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python", "console", "bash", "sh"}
FENCE = re.compile(r"^```(\S*)\s*$")
DIRECTIVE = re.compile(r"^<!-- docs-test: (skip|requires|write) (.+?) -->$")
TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Block:
    document: pathlib.Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    directive: tuple[str, str] | None

    @property
    def id(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks_of(document: pathlib.Path) -> list[Block]:
    """The fenced blocks of one Markdown file, with the directive before each."""
    lines = document.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = DIRECTIVE.match(lines[i - 1]) if i else None
        found.append(
            Block(
                document,
                i + 1,
                opening.group(1),
                "\n".join(lines[i + 1 : end]) + "\n",
                before.groups() if before else None,
            )
        )
        i = end + 1
    return found


def _runnable(document: pathlib.Path) -> list[Block]:
    return [b for b in blocks_of(document) if b.language in RUN_LANGUAGES]


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    """One working folder per document, shared by its blocks in order."""
    made: dict[pathlib.Path, pathlib.Path] = {}

    def get(document: pathlib.Path) -> pathlib.Path:
        if document not in made:
            folder = tmp_path_factory.mktemp(document.stem)
            shutil.copytree(ROOT / "examples", folder / "examples")
            made[document] = folder
        return made[document]

    return get


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(pathlib.Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    return env


def _run(args, cwd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=cwd,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


def _console_commands(code: str) -> list[tuple[str, str | None]]:
    """(command, the error line its shown output holds, if any) for each `$ ` line."""
    commands: list[tuple[str, str | None]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], None))
        elif commands and "error:" in line and commands[-1][1] is None:
            commands[-1] = (commands[-1][0], line.strip())
    return commands


def _check(block: Block, proc: subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode == 0, (
        f"{block.id}: {what} exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-3000:]}"
    )


ALL_BLOCKS = [b for d in DOCUMENTS for b in _runnable(d)]


def _importable(name: str) -> bool:
    """Whether module `name` can be imported (find_spec of `a.b` imports `a`, which raises
    where `a` itself is missing)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.id)
def test_block_runs_as_written(block: Block, workdirs):
    if block.directive:
        kind, arg = block.directive
        if kind == "skip":
            pytest.skip(f"{block.id}: {arg}")
        if kind == "requires" and not _importable(arg):
            pytest.skip(f"{block.id}: needs {arg!r} (pip install -e '.[{arg}]')")
    cwd = workdirs(block.document)
    if block.directive and block.directive[0] == "write":
        (cwd / block.directive[1]).write_text(block.code)
    if block.language == "python":
        # From a file, as a reader runs it: autograph reads the source of what it converts.
        script = cwd / f"_block_{block.line}.py"
        script.write_text(block.code)
        _check(block, _run([sys.executable, script.name], cwd), "the block")
    elif block.language in ("bash", "sh"):
        _check(block, _run(["bash", "-euo", "pipefail", "-c", block.code], cwd), "the script")
    else:
        for command, error in _console_commands(block.code):
            proc = _run(["bash", "-o", "pipefail", "-c", command], cwd)
            if error is None:
                _check(block, proc, f"`{command}`")
            else:
                assert proc.returncode != 0, f"{block.id}: `{command}` should fail"
                assert error in proc.stderr, (
                    f"{block.id}: `{command}` failed with\n{proc.stderr}\nnot\n{error}"
                )


def test_every_document_is_collected():
    names = {b.document.name for b in ALL_BLOCKS}
    assert "README.md" in names and len(names) >= 5, names


def test_directives_are_known():
    """A misspelt directive would silently run (or skip) a block."""
    for document in DOCUMENTS:
        for number, line in enumerate(document.read_text().split("\n"), 1):
            if "docs-test" in line:
                assert DIRECTIVE.match(line), f"{document.name}:{number}: {line}"


def test_console_error_lines_are_read():
    commands = _console_commands("$ a\nout\n$ b\naotkit b: error: no\n")
    assert commands == [("a", None), ("b", "aotkit b: error: no")]


# --- What the README shows (issue 43) ----------------------------------------------------------

README = ROOT / "README.md"


def _readme_block(containing: str) -> Block:
    return next(b for b in blocks_of(README) if containing in b.code)


def test_readme_starts_with_the_two_commands_then_says_what_they_need():
    text = README.read_text()
    first = blocks_of(README)[0]
    commands = first.code.strip().splitlines()
    assert first.language == "bash" and len(commands) == 2
    assert commands[0].startswith("pip install -e . && aotkit lower examples/mlp.py:predict")
    assert commands[1].startswith("pip install -e '.[test]' && ruff check .")
    # Nothing but the title and the block's directive comes first.
    head = text[: text.index("```")].strip().splitlines()
    assert head[0] == "# aotkit" and all(DIRECTIVE.match(line) for line in head[1:] if line)
    # The first paragraph after the commands says what they need.
    after = text[text.index("```\n", text.index("```") + 3) + 4 :].strip().split("\n\n")[0]
    assert "Python 3.11 to 3.13" in after and "Linux" in after and "#requirements" in after


def test_readme_dumps_example_prints_the_files_it_shows(tmp_path):
    block = _readme_block("os.listdir(dumps)")
    lines = block.code.rstrip("\n").split("\n")
    shown = [line for line in lines if line.startswith("#")]
    code = "\n".join(line for line in lines if not line.startswith("#"))
    proc = _run([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    expected = ast.literal_eval(" ".join(line.lstrip("# ") for line in shown))
    assert ast.literal_eval(proc.stdout) == expected
    assert len(expected) == 5


def test_readme_tutorial_repr_is_what_lowering_prints(tmp_path):
    (tmp_path / "rbf.py").write_text(_readme_block("def rbf_kernel").code)
    block = _readme_block("print(repr(lowered))")
    line = next(ln for ln in block.code.splitlines() if ln.startswith("print(repr(lowered))"))
    shown = line.split("# ", 1)[1].removesuffix("...")
    code = (
        "import aotkit\nfrom rbf import rbf_kernel\n"
        + next(ln for ln in block.code.splitlines() if ln.startswith("lowered = "))
        + "\nprint(repr(lowered))\n"
    )
    proc = _run([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(shown)
    assert "args[0]" not in proc.stdout


def test_the_tutorial_announces_its_failing_command():
    block = _readme_block("$ aotkit lower rbf.py:rbf_kernel --shapes 'f32[128,3]'\n")
    text = README.read_text()
    before = text[: text.index(block.code)].rsplit("\n\n", 2)[-2]
    assert "fails on purpose" in before
    failing = [c for c, error in _console_commands(block.code) if error is not None]
    assert failing == ["aotkit lower rbf.py:rbf_kernel --shapes 'f32[128,3]'"]
