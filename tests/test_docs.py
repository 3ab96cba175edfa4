"""The manual stays whole: every relative link and image of README.md and docs/ points at a file (and a heading)
that exists, README.md stays a front page, every page is in mkdocs.yml's nav, and the configuration reference is
exactly what docs/gen_config_reference.py writes from the schema. `make docs` (mkdocs build --strict, in CI) checks
the rendered site as well; these checks need no mkdocs and run in a second."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", ROOT / "docs" / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """The Markdown outside fenced code blocks and inline code, where a link is a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(page.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def anchors(page: Path) -> set[str]:
    """The heading ids mkdocs (Python-Markdown's toc) gives `page`."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*$", re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M),
                          flags=re.M)
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_points_at_a_file_and_heading_that_exist(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file})")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_link_check_finds_links_and_catches_a_broken_one(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n## Its part\n\n[ok](#its-part) ![img](gone.png) `[not](a-link.md)`\n"
                    "```\n[nor](this.md)\n```\n[web](https://example.org)\n")
    assert links(page) == ["#its-part", "gone.png"]
    assert anchors(page) == {"a-page", "its-part"}
    assert links(ROOT / "README.md"), "README.md links to the manual"


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines: move detail into docs/"
    listed = {Path(t.partition("#")[0]).name for t in links(ROOT / "README.md") if t.startswith("docs/")}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages <= listed, f"README.md's index misses {sorted(pages - listed)}"


def _nav_files(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    return [f for value in nav.values() for f in _nav_files(value)]


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_files(config["nav"])
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(nav) == pages
    assert config["strict"] is True, "mkdocs.yml: strict, so that a broken link fails the build"
    assert config["theme"]["name"] == "material" and config["theme"]["font"] is False, "no web fonts: builds offline"


def test_the_configuration_reference_is_what_the_schema_generates():
    page = (ROOT / "docs" / "configuration-reference.md").read_text()
    assert page == _generator().render(), "docs/configuration-reference.md is out of date: run `make docs`"


def test_every_schema_key_has_a_description_in_the_reference():
    empty = [line.split("|")[1].strip() for line in _generator().render().splitlines()
             if line.startswith("| `") and line.rstrip().endswith("|  |")]
    assert not empty, f"keys without a description in config.schema.yaml: {empty}"


def test_the_generator_documents_a_new_key_from_its_schema_description():
    schema = yaml.safe_load((ROOT / "workflow" / "mcgrpo" / "core" / "config.schema.yaml").read_text())
    schema["properties"]["recipe"]["properties"]["warmup"] = {
        "type": "integer", "minimum": 0, "default": 3, "description": "iterations of <b>warmup</b> | before"}
    row = next(line for line in _generator().render(schema).splitlines() if line.startswith("| `recipe.warmup`"))
    assert row == "| `recipe.warmup` | integer ≥ 0 | `3` | iterations of &lt;b&gt;warmup&lt;/b&gt; \\| before |"
