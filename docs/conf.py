# The documentation site: Sphinx with MyST (the pages are Markdown). Built in CI by tests/docs/test_docs.py with
# `sphinx-build -W --keep-going`: any warning (a link or anchor between pages that does not resolve, a page that no
# table of contents lists) fails the build.
project = "ccl-torch"
author = "the ccl-torch developers"
copyright = "the ccl-torch developers, BSD-3-Clause"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3  # page.md#a-heading links resolve (and are checked) down to ### headings
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "ccl-torch"
