"""MkDocs hooks: put the repository's other Markdown and notebooks on the site, with links that work in both.

Every page is written with links as they are in the repository (``../bench/README.md``,
``docs/concepts.md``, ``../notebooks/01-quickstart.ipynb``), so the files read correctly where they lie.
The site takes three files from outside ``docs/`` — ``README.md`` as the home page, ``bench/README.md``
as the benchmarks page and the notebooks (rendered by mkdocs-jupyter, not executed) — and this hook
rewrites each link to where its target sits on the site. A link to anything else outside ``docs/`` is
left alone, so the strict build names it.

``SpecialMembers`` is a griffe extension (mkdocstrings' ``extensions``): an undocumented special member
(``__repr__``, ``__all__``) stays off the API reference, where it would be a bare name.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import griffe
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))

# repository path -> site path (relative to docs/)
OUTSIDE = {"README.md": "index.md", "bench/README.md": "benchmarks.md"} | {
    f"notebooks/{n}": f"notebooks/{n}" for n in NOTEBOOKS
}
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")


@event_priority(100)  # before mkdocs-jupyter wraps the notebooks
def on_files(files: Files, config) -> Files:
    for repo_path, site_path in OUTSIDE.items():
        if repo_path == site_path:  # a notebook: mkdocs-jupyter reads it through src_dir
            files.append(File(site_path, str(ROOT), config["site_dir"], config["use_directory_urls"]))
        else:
            files.append(File.generated(config, site_path, abs_src_path=str(ROOT / repo_path)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    site_path = page.file.src_uri
    if site_path.endswith(".ipynb"):  # mkdocs-jupyter renders a notebook from its file, not from this text
        return markdown
    repo_path = next((r for r, s in OUTSIDE.items() if s == site_path), f"docs/{site_path}")
    lines, in_code = [], False
    for line in markdown.splitlines(keepends=True):
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        elif not in_code:
            line = LINK.sub(lambda m: _rewrite(m, repo_path, site_path), line)
        lines.append(line)
    return "".join(lines)


def _rewrite(match: re.Match[str], repo_path: str, site_path: str) -> str:
    target = match.group(2)
    if re.match(r"^[a-z]+:|^#|^/", target):
        return match.group(0)
    path, _, anchor = target.partition("#")
    real = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path), path))
    if real in OUTSIDE:
        on_site = OUTSIDE[real]
    elif real.startswith("docs/"):
        on_site = real.removeprefix("docs/")
    else:
        return match.group(0)
    new = posixpath.relpath(on_site, posixpath.dirname(site_path) or ".")
    return match.group(1) + new + (f"#{anchor}" if anchor else "") + match.group(3)


class SpecialMembers(griffe.Extension):
    """Drop ``__dunder__`` members without a docstring; ``__init__`` is merged into its class."""

    def on_members(self, *, obj: griffe.Object, **kwargs: object) -> None:
        for name, member in list(obj.members.items()):
            special = name.startswith("__") and name.endswith("__") and name != "__init__"
            if special and not member.is_alias and not member.docstring:
                obj.del_member(name)
