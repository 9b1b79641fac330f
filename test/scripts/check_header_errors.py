#!/usr/bin/env python3
"""Every header states its error convention once, at the top.

CONTRIBUTING.md ("Error conventions") has three conventions for how a call fails,
and a caller must know which one a header's calls use before calling them: a -1 read as
a negative errno, or an errno read as a count, is a bug no compiler sees. So each
header's top comment carries one `Errors:` line naming its convention (or saying
plainly that nothing in it fails). This fails on a tracked header outside test/ whose
first comment block has no such line, and names each one.

Run by ctest as unit/test_header_errors; `check_header_errors.py [REPO]` by hand.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
ERRORS_LINE = re.compile(r"^\s*(?:/?\*+|//)?\s*Errors:", re.M)


def skipped(rel):
    """test/'s headers are helpers read beside their tests; build trees (build/,
    build-asan/, ...) hold generated headers."""
    top = pathlib.PurePath(rel).parts[0]
    return top == "test" or top.startswith("build") or top == ".git"


def tracked_headers():
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.h"], check=True,
                             capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        # Not a git checkout (a source tarball): every header on disk.
        out = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.h")]
    return sorted(p for p in out if not skipped(p))


def first_comment(text):
    """The first comment block: a /* ... */ or a run of // lines, before any code."""
    m = re.match(r"\s*(/\*.*?\*/)", text, re.S)
    if m:
        return m.group(1)
    m = re.match(r"\s*((?://[^\n]*\n\s*)+)", text)
    return m.group(1) if m else ""


def main():
    missing = []
    for rel in tracked_headers():
        path = ROOT / rel
        if not path.is_file():
            continue
        if not ERRORS_LINE.search(first_comment(path.read_text())):
            missing.append(rel)
    if missing:
        for rel in missing:
            print(f"{rel}: its top comment has no `Errors:` line; add one saying which "
                  "convention its calls use (CONTRIBUTING.md, \"Error conventions\": "
                  "1, 2, 3, or its own stated plainly), or `Errors: none: nothing here "
                  "fails.`")
        sys.exit(f"check_header_errors: {len(missing)} header(s) without an `Errors:` line")
    print(f"check_header_errors: {len(tracked_headers())} headers state their error convention")


main()
