#!/usr/bin/env python3
"""docs/README.md indexes every document in docs/: fails naming each *.md there that
docs/README.md does not link to, and each link there to a document that does not exist.
Run by ctest as unit/test_docs_index; `check_docs_index.py [REPO]` by hand."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
docs = root / "docs"
index = (docs / "README.md").read_text()
linked = set(re.findall(r"\]\(([A-Za-z0-9_.-]+\.md)(?:#[^)]*)?\)", index))
present = {p.name for p in docs.glob("*.md")} - {"README.md"}
problems = [f"docs/README.md does not index docs/{n}" for n in sorted(present - linked)]
problems += [f"docs/README.md links to docs/{n}, which does not exist" for n in sorted(linked - present)]
if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"check_docs_index: docs/README.md indexes all {len(present)} documents")
