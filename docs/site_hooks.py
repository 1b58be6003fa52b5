"""mkdocs hooks (mkdocs.yml): the site also shows README.md, as its home page, and BENCHMARKS.md, which live at the
repository's root rather than in docs/. Links are written to work on the repository (`../BENCHMARKS.md` from a
guide, `docs/serving.md` from the README); here they are rewritten to the pages' places on the site."""

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT_PAGES = {"README.md": "index.md", "BENCHMARKS.md": "BENCHMARKS.md"}  # repository file -> site page
TO_ROOT = re.compile(r"\]\(\.\./(README|BENCHMARKS)\.md")  # a guide's link to a root page
FROM_ROOT = re.compile(r"(\]\(|<img src=\")docs/")  # a root page's link into docs/


def on_files(files, config):
    root = Path(config.config_file_path).parent
    for source, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, content=(root / source).read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.generated_by:  # a root page
        return FROM_ROOT.sub(r"\1", markdown)
    return TO_ROOT.sub(lambda m: "](" + ROOT_PAGES[m[1] + ".md"], markdown)
