"""The ``pdevision`` console script: ``pdevision``, ``pdevision -h`` and ``pdevision --help`` are answered from the
help text recorded beside the package (``pdevision/cli_help.txt``, written by ``python docs/cli_reference.py`` and
checked current by the tests), without importing torch, timm or the models; every other command line goes to
:func:`pdevision.cli.main`.

This module lives outside the ``pdevision`` package because importing anything inside it imports the package,
which registers the models with timm (torch, torchvision and timm: seconds). Where tasks of other packages are
installed (entry points ``pdevision.tasks``, which may add commands), the help comes from the full parser instead.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from importlib.util import find_spec
from pathlib import Path

HELP_FILE = "cli_help.txt"


def recorded_help() -> str | None:
    """The recorded top-level help, or ``None`` where it cannot stand for the parser's (plug-ins, no file)."""
    if entry_points(group="pdevision.tasks"):
        return None
    spec = find_spec("pdevision")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        try:
            return (Path(folder) / HELP_FILE).read_text(encoding="utf-8")
        except OSError:
            continue
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in ([], ["-h"], ["--help"]):
        text = recorded_help()
        if text is not None:
            sys.stdout.write(text)
            return 0
    from pdevision.cli import main as run  # the full command line: torch, timm and the models

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
