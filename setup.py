"""The package description: README.md with its relative links and images made absolute, so that they work on a
package index page. Everything else is in pyproject.toml (``readme`` is declared dynamic there)."""

from __future__ import annotations

import re
from pathlib import Path

# where the repository's files are served (a placeholder until the project has a public host; the same host as
# pyproject.toml's [project.urls])
REPOSITORY = "https://github.com/pdevision/pdevision"
BRANCH = "main"

# the target of ](target) (Markdown links and images, nested ones included) and of src="target" / href="target"
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)")
_HTML = re.compile(r"(?P<attr>\b(?:src|href))=\"(?P<target>[^\"]+)\"")
_ABSOLUTE = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|#|/)")  # a scheme (https:, mailto:), an anchor, a root path
_IMAGE = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")


def absolute_url(target: str) -> str:
    """A repository-relative ``target`` as a URL: images from the raw files, the rest to the repository's pages."""
    if _ABSOLUTE.match(target):
        return target
    path = target.removeprefix("./")
    kind = "raw" if path.lower().split("#")[0].endswith(_IMAGE) else "blob"
    return f"{REPOSITORY}/{kind}/{BRANCH}/{path}"


# fenced code blocks and inline code spans: their text is code, never a link
_CODE = re.compile(r"^(?P<fence>`{3,}|~{3,}).*?^(?P=fence)[ \t]*$|`+[^`\n]*`+", re.MULTILINE | re.DOTALL)


def _absolute_text(text: str) -> str:
    text = _LINK.sub(lambda m: f"]({absolute_url(m['target'])}", text)
    return _HTML.sub(lambda m: f'{m["attr"]}="{absolute_url(m["target"])}"', text)


def absolute_links(markdown: str) -> str:
    """``markdown`` with every relative link and image target (Markdown and HTML) made absolute; anchors and code
    (fenced blocks, inline spans) stay as they are."""
    out, last = [], 0
    for m in _CODE.finditer(markdown):
        out += [_absolute_text(markdown[last : m.start()]), m.group()]
        last = m.end()
    return "".join([*out, _absolute_text(markdown[last:])])


if __name__ == "__main__":
    from setuptools import setup

    readme = (Path(__file__).parent / "README.md").read_text(encoding="utf-8")
    setup(long_description=absolute_links(readme), long_description_content_type="text/markdown")
