"""The documentation's code runs as written.

Every ``python`` block of a page under ``docs/`` runs, in the page's order, in a scratch directory and a fresh
namespace per page (``__name__ == "__main__"``, as a script). A block whose fence says ``title="not run..."`` is
skipped; the list of those is kept short and checked below. Every ``pdevision`` command of a shell block is
checked against the command-line parser: the command exists and each flag it uses is one of its flags.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
from pathlib import Path

import pytest

from pdevision.cli import build_parser
from pdevision.tasks import registry, tasks

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "api" not in p.relative_to(DOCS).parts)
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", flags=re.S | re.M)
NOT_RUN = {("using.md", "python"), ("training.md", "bash")}  # the blocks that say title="not run..."
# pages whose Python takes more than a few seconds of CPU (model export, training, detectors): `make test-all`
SLOW_PAGES = {"deploy.md", "adding-a-task.md", "adding-a-family.md", "dense.md", "pretraining.md"}


def blocks(page: Path) -> list[tuple[str, str]]:
    """``(info, code)`` of each fenced block of ``page``: ``info`` is what follows the opening backticks."""
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(page.read_text())]


def python_blocks(page: Path) -> list[str]:
    return [code for info, code in blocks(page) if info.split(" ")[0] == "python" and "not run" not in info]


def _page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def test_the_pages_are_found_and_the_not_run_list_is_short() -> None:
    assert len(PAGES) >= 15
    skipped = {(p.name, info.split(" ")[0]) for p in PAGES for info, _ in blocks(p) if "not run" in info}
    assert skipped == NOT_RUN


RUNNABLE = [p for p in PAGES if python_blocks(p)]


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_PAGES else p for p in RUNNABLE],
    ids=[_page_id(p) for p in RUNNABLE],
)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # a page that registers a task (adding-a-task.md) must not leave it to the tests that run after it
    monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))
    namespace: dict[str, object] = {"__name__": "__main__"}  # as a script: timm's register_model needs a module
    for code in python_blocks(page):
        exec(compile(code, str(page), "exec"), namespace)
    if page.name == "deploy.md":
        assert os.path.getsize("vheat_micro.onnx") > 0


# -- shell blocks: the pdevision commands and their flags exist ---------------------------------------------------


def shell_commands(text: str) -> list[list[str]]:
    """The argument lists after ``pdevision`` (or ``-m pdevision.cli``) in a shell block, one per command line."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"^([A-Z_][A-Z0-9_]*=\S*\s+)+", "", line.split(" #")[0].strip())  # VAR=value pdevision ...
        first = line.split(" ")[0]
        if os.path.basename(first) != "pdevision" and first != "torchrun":  # other commands, output, comments
            continue
        words = shlex.split(line.replace("[", " ").replace("]", " "))
        words[0] = os.path.basename(words[0])
        for i, word in enumerate(words):
            if word == "pdevision" or (word == "pdevision.cli" and i > 0 and words[i - 1] == "-m"):
                commands.append(words[i + 1 :])
                break
    return commands


@functools.cache
def _parser(train_task: str, checkpoint_task: str) -> argparse.ArgumentParser:
    return build_parser(train_task=train_task, checkpoint_task=checkpoint_task)


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def check_command(argv: list[str]) -> None:
    """Fail unless ``pdevision *argv`` names an existing command and only flags that command takes."""
    task = argv[argv.index("--task") + 1] if "--task" in argv[:-1] else "classify"
    if argv and argv[0] == "train":
        assert task.split("|")[0] in tasks(), f"unknown --task {task} in: pdevision {shlex.join(argv)}"
    names = [task.split("|")[0]] if argv and argv[0] == "train" else list(tasks())
    allowed: set[str] = set()
    for name in names:  # eval and predict take the flags of the checkpoint's task: any task's
        parser = _parser(name if argv and argv[0] == "train" else "classify", name)
        allowed |= _flags(parser)
        for word in argv:
            if word.startswith("-"):
                continue
            sub = _subparsers(parser)
            if not sub:
                break
            choices = word.split("|")  # a synopsis such as `viz erf|gradcam|heat` names several
            for choice in choices:
                assert choice in sub, f"no command {choice!r} in: pdevision {shlex.join(argv)}"
                allowed |= _flags(sub[choice])
            parser = sub[choices[0]]
    used = {word.split("=")[0] for word in argv if word.startswith("--")}
    unknown = used - allowed
    assert not unknown, f"no flag {sorted(unknown)} in: pdevision {shlex.join(argv)}"


SHELL = [
    (page, n, argv)
    for page in [*PAGES, ROOT / "README.md"]
    for n, (info, code) in enumerate(blocks(page))
    if info.split(" ")[0] in ("", "bash", "sh", "console", "shell")
    for argv in shell_commands(code)
]


def test_shell_blocks_name_existing_commands_and_flags() -> None:
    assert len(SHELL) >= 40
    failures = []
    for page, n, argv in SHELL:
        try:
            check_command(argv)
        except AssertionError as exc:
            failures.append(f"{page.name}, block {n}: {exc}")
    assert not failures, "\n".join(failures)


def test_the_command_check_can_fail() -> None:
    with pytest.raises(AssertionError, match="no flag"):
        check_command(["train", "--task", "segment", "--no-such-flag", "1"])
    with pytest.raises(AssertionError, match="no command"):
        check_command(["viz", "nothing"])
    with pytest.raises(AssertionError, match="unknown --task"):
        check_command(["train", "--task", "nothing"])
    assert shell_commands("torchrun --nnodes 2 \\\n  -m pdevision.cli train --data D  # a comment") == [
        ["train", "--data", "D"]
    ]
    assert shell_commands("PDEVISION_DATA_CACHE=~/c A=1 pdevision train --data D") == [["train", "--data", "D"]]


def test_contributing_names_only_make_targets_that_exist_and_ci_runs_lint() -> None:
    """CONTRIBUTING.md's commands are targets of the Makefile, the architecture page is in the site's navigation,
    and CI runs the lint that CONTRIBUTING asks for."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    text = (ROOT / "CONTRIBUTING.md").read_text()
    named = set(re.findall(r"^make ([a-z-]+)", "\n".join(b for kind, b in blocks(ROOT / "CONTRIBUTING.md")), re.M))
    assert {"demo", "test", "lint", "docs"} <= named <= targets, named - targets
    assert "docs/architecture.md" in text and "architecture.md" in (ROOT / "mkdocs.yml").read_text()
    ci = (ROOT / ".ci" / "run").read_text().split()
    assert {"test", "lint", "docs", "dist"} <= {ci[i + 1] for i, word in enumerate(ci[:-1]) if word == "make"}


LINK = re.compile(r"\]\(([^)#\s]+)")


def relative_links(page: Path) -> list[str]:
    """The relative link targets of a Markdown page, fenced code left out (a link there is an example)."""
    text = FENCE.sub("", page.read_text())
    return [link for link in LINK.findall(text) if "://" not in link and not link.startswith("mailto:")]


def test_every_relative_link_of_the_docs_and_the_readme_resolves() -> None:
    """A link into ``benchmarks/`` (or anywhere) from a page or the README names a file or folder that exists."""
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    missing = [
        f"{p.relative_to(ROOT)}: {link}" for p in pages for link in relative_links(p) if not (p.parent / link).exists()
    ]
    assert any("benchmarks/" in link for p in pages for link in relative_links(p))
    assert not missing, "links to missing files:\n" + "\n".join(missing)


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[a](gone.md) [b](https://x.org/y) [c](page.md#top)\n```\n[d](in-a-fence.md)\n```\n")
    assert relative_links(page) == ["gone.md", "page.md"]
    assert [link for link in relative_links(page) if not (page.parent / link).exists()] == ["gone.md"]
