"""MkDocs hook: the recorded results under ``benchmarks/`` become part of the site.

Pages link to records as the repository lays them out (``../benchmarks/scenes.md`` from ``docs/``), so the links
also work where the Markdown is read in the repository. The hook adds every file of ``benchmarks/`` (Python caches
excepted) to the site under ``benchmarks/``, gives each folder without a README an index page that lists its
files, and rewrites the links to the site's layout (a link to a folder goes to its README or index).
"""

from __future__ import annotations

import os
import posixpath
import re

from mkdocs.structure.files import File, Files, InclusionLevel

RECORDS = "benchmarks"
_LINK = re.compile(r"(\]\()([^)\s#]+)")
_root = ""


def on_files(files: Files, config) -> Files:
    global _root
    _root = os.path.dirname(os.path.abspath(config["config_file_path"]))
    top = os.path.join(_root, RECORDS)
    for folder, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = posixpath.normpath(posixpath.join(RECORDS, os.path.relpath(folder, top).replace(os.sep, "/")))
        for name in sorted(names):
            path, uri = os.path.join(folder, name), posixpath.join(rel, name)
            files.append(File.generated(config, uri, abs_src_path=path, inclusion=InclusionLevel.NOT_IN_NAV))
        if "README.md" not in names and "index.md" not in names:
            lines = [f"# {rel}/", "", "Recorded files in this folder:", ""]
            lines += [f"- [{d}/]({d}/)" for d in dirs] + [f"- [{n}]({n})" for n in sorted(names)]
            files.append(
                File.generated(
                    config,
                    posixpath.join(rel, "index.md"),
                    content="\n".join(lines) + "\n",
                    inclusion=InclusionLevel.NOT_IN_NAV,
                )
            )
    return files


def _folder_page(repo_path: str) -> str:
    """``repo_path`` itself, or the page that stands for it when it is a folder of records."""
    if os.path.isdir(os.path.join(_root, repo_path)):
        name = "README.md" if os.path.exists(os.path.join(_root, repo_path, "README.md")) else "index.md"
        return posixpath.join(repo_path, name)
    return repo_path


def on_page_markdown(markdown: str, page, config, files) -> str:
    here = posixpath.dirname(page.file.src_uri)
    is_record = page.file.src_uri.startswith(RECORDS + "/")

    def fix(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith("/"):
            return match.group(0)
        # where the link points in the repository: records sit at their own place, pages under docs/
        repo_path = posixpath.normpath(posixpath.join(here if is_record else posixpath.join("docs", here), target))
        if not (repo_path == RECORDS or repo_path.startswith(RECORDS + "/")):
            return match.group(0)
        return match.group(1) + posixpath.relpath(_folder_page(repo_path), here or ".")

    return _LINK.sub(fix, markdown)
