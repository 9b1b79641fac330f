#!/usr/bin/env python3
"""The engine's settings have one source, src/engine/config_settings.h; this fails when what is
written about them elsewhere drifts from it:

- every key of the table is described in rampart.h's key list, and no other key is;
- docs/operations.md's "Settings" table lists the same keys, and for each key whose row
  has a default value, the docs' default column shows that value;
- every row's help starts with KEY= (what --help prints is the table's own help);
- for each key whose row has a default value, its help and its entry in rampart.h's key
  list each state that default, as "(default VALUE" or "(default: VALUE", and state no
  other (a key whose DEFAULT is NULL describes its default in words: not checked).

Run by ctest as unit/test_settings_table; `check_settings.py [REPO]` by hand.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]

ROW = re.compile(r'X\(\s*"([^"]+)"\s*,\s*(\w+)\s*,\s*(NULL|"[^"]*")\s*,((?:\s*\\?\s*"(?:[^"\\]|\\.)*")+)\s*\)')


def table_rows():
    text = (ROOT / "src/engine/config_settings.h").read_text()
    body = text[text.index("#define RAMPART_SETTINGS(X)"):]
    rows = []
    for key, setter, default, help_part in ROW.findall(body):
        help_text = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', help_part))
        rows.append((key, setter, None if default == "NULL" else default.strip('"'), help_text))
    if not rows:
        sys.exit("check_settings: no X(...) rows found in src/engine/config_settings.h")
    # Every X( in the macro must have parsed: a row this pattern misses would go unchecked.
    written = len(re.findall(r'X\(\s*"', body))
    if written != len(rows):
        sys.exit(f"check_settings: src/engine/config_settings.h has {written} rows, parsed "
                 f"{len(rows)}: keep each row as X(KEY, SETTER, DEFAULT, HELP), strings literal")
    return rows


def header_entries():
    """rampart.h's key list: each key's text, its own line and the lines indented under it."""
    text = (ROOT / "src/engine/rampart.h").read_text()
    start = text.index("/* Configuration, filled through rampart_config_set()")
    block = text[start:text.index("*/", start)]
    entries = {}
    key = None
    for line in block.splitlines():
        m = re.match(r"^ \*   ([a-z][a-z-]*)=", line)
        if m:
            key = m.group(1)
            entries[key] = line
        elif key and re.match(r"^ \*     ", line):
            entries[key] += "\n" + line
        else:
            key = None
    return entries


# "(default 32)", "(default on; off for ...)", "(default: auto)": the value is the word
# after it. A key whose default is not a value it takes says so in words
# ("(default: a temporary file)"), and its row's DEFAULT is NULL.
DEFAULT_SAID = re.compile(r"\(default:?\s+([^\s;:,)]+)")


def default_problems(key, default, where, text):
    said = DEFAULT_SAID.findall(text)
    if not said:
        return [f"{where} does not state {key}'s default: config_settings.h's is "
                f"{default!r}; say '(default {default})'"]
    return [f"{where} says {key}'s default is {value!r}; config_settings.h's DEFAULT is "
            f"{default!r}" for value in said if value != default]


def docs_rows():
    text = (ROOT / "docs/operations.md").read_text()
    start = text.index("\n## Settings")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([a-z][a-z-]*)` \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def main():
    problems = []
    rows = table_rows()
    keys = [r[0] for r in rows]
    if len(set(keys)) != len(keys):
        problems.append(f"config_settings.h lists a key twice: {sorted(k for k in keys if keys.count(k) > 1)}")
    table = set(keys)

    for key, _setter, _default, help_text in rows:
        if not help_text.startswith(key + "="):
            problems.append(f"config_settings.h: the help of {key} does not start with '{key}='")
        if not help_text.endswith("\\n"):
            problems.append(f"config_settings.h: the help of {key} does not end in a newline")

    entries = header_entries()
    header = set(entries)
    for k in sorted(table - header):
        problems.append(f"rampart.h's key list does not describe {k}= (config_settings.h has it)")
    for k in sorted(header - table):
        problems.append(f"rampart.h's key list describes {k}=, which config_settings.h does not have")

    for key, _setter, default, help_text in rows:
        if default is None:
            continue
        problems += default_problems(key, default, "config_settings.h's help", help_text)
        if key in entries:
            problems += default_problems(key, default, "rampart.h's key list", entries[key])

    docs = docs_rows()
    for k in sorted(table - docs.keys()):
        problems.append(f"docs/operations.md's Settings table has no row for {k}")
    for k in sorted(docs.keys() - table):
        problems.append(f"docs/operations.md's Settings table has {k}, which config_settings.h does not")
    for key, _setter, default, _help in rows:
        if default is not None and key in docs and f"`{default}`" not in docs[key]:
            problems.append(f"docs/operations.md says {key}'s default is {docs[key]!r}; "
                            f"config_settings.h says {default!r}")

    if problems:
        print("\n".join(problems))
        print(f"check_settings: {len(problems)} problem(s); src/engine/config_settings.h is the source")
        return 1
    print(f"check_settings: {len(rows)} keys agree in config_settings.h, rampart.h and "
          f"docs/operations.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
