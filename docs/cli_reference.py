"""Writes the command-line reference from the parser: ``docs/cli-reference.md`` (every flag of every command, for
every task) and ``src/pdevision/cli_help.txt`` (the top-level ``pdevision --help``, which the console script prints
without importing torch). ``tests/test_cli_reference.py`` fails when either is not what this script writes now.

    python docs/cli_reference.py          # after changing a command, a flag or its help
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli-reference.md"
HELP = ROOT / "src" / "pdevision" / "cli_help.txt"
COLUMNS = "100"  # argparse wraps to the terminal's width: the recorded help is wrapped to this one


@contextmanager
def _columns() -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def top_level_help() -> str:
    from pdevision.cli import build_parser

    with _columns():
        return build_parser().format_help()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The one-line help of each subcommand of ``parser``."""
    return {
        a.dest: a.help or ""
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for a in action._choices_actions
    }


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None:
        choices = list(map(str, action.choices))
        if len(choices) > 8:  # model names: the list is `pdevision models`
            return "{" + ",".join(choices[:4]) + f",...}} ({len(choices)} choices)"
        return "{" + ",".join(choices) + "}"
    name = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    if action.nargs in ("*", "+"):
        return f"{name} ..."
    if action.nargs == "?":
        return f"[{name}]"
    return str(name)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return ""
    if isinstance(action.default, list):
        return "`" + " ".join(map(str, action.default)) + "`" if action.default else ""
    return f"`{action.default}`" if action.default != "" else ""


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {**vars(action), "prog": ""}
    return _cell(text)


def _table(actions: list[argparse.Action]) -> list[str]:
    rows = ["| flag | value | default | description |", "|---|---|---|---|"]
    for a in actions:
        if isinstance(a, argparse._HelpAction | argparse._SubParsersAction):
            continue
        flag = ", ".join(f"`{o}`" for o in a.option_strings) or f"`{a.dest}` (positional)"
        if a.required and a.option_strings:
            flag += " (required)"
        rows.append(f"| {flag} | {_cell(_value(a))} | {_default(a)} | {_help(a)} |")
    return rows


def _command(title: str, parser: argparse.ArgumentParser, note: str = "") -> list[str]:
    lines = [f"## `{title}`", ""]
    if parser.description or note:
        lines += [_cell(note or parser.description), ""]
    with _columns():
        first, *rest = parser.format_usage().strip().removeprefix("usage: ").splitlines()
    lines += ["```text", first, *("    " + line.strip() for line in rest), "```", ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        actions = [a for a in actions if not isinstance(a, argparse._SubParsersAction)]
        if not actions:
            continue
        if group.title not in ("positional arguments", "options", "optional arguments"):
            lines += [f"**{group.title}**", ""]
        lines += [*_table(actions), ""]
    return lines


def reference_page() -> str:
    from pdevision.cli import build_parser
    from pdevision.tasks import tasks

    registry = tasks()
    top = build_parser()
    commands = _subparsers(top)
    helps = _helps(top)
    lines = [
        "# Command-line reference",
        "",
        "Every flag of every command, written from the parser by `python docs/cli_reference.py` (the tests fail",
        "when this page is not what the parser says). `train` takes the flags of its `--task`, `eval` and",
        "`predict` those of the checkpoint's task: each is listed per task. How the commands are used is in",
        "[Command line](cli.md).",
        "",
    ]
    lines += _command("pdevision", top)
    for name, parser in commands.items():
        if name == "train":
            for task in registry:
                train = _subparsers(build_parser(train_task=task))["train"]
                lines += _command(f"pdevision train --task {task}", train, registry[task].help)
        elif name in ("eval", "predict"):
            owners = [t for t, c in registry.items() if getattr(c, f"{name}_options") is not None]
            for task in owners:
                p = _subparsers(build_parser(checkpoint_task=task))[name]
                lines += _command(f"pdevision {name} (a {task} checkpoint)", p, helps.get(name, ""))
        elif name == "viz":
            for what, sub in _subparsers(parser).items():
                lines += _command(f"pdevision viz {what}", sub, _helps(parser).get(what, ""))
        else:
            lines += _command(f"pdevision {name}", parser, helps.get(name, ""))
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    sys.path.insert(0, str(ROOT / "src"))
    PAGE.write_text(reference_page(), encoding="utf-8")
    HELP.write_text(top_level_help(), encoding="utf-8")
    print(f"written: {PAGE.relative_to(ROOT)}, {HELP.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
