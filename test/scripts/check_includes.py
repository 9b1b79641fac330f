#!/usr/bin/env python3
"""The include graph of src/, and its cycles.

A node is a module: NAME.c and NAME.h together, and a header that declares another
file's functions belongs to that file (HEADER_OWNER: engine_internal.h declares
engine.c's, client.h client_conn.c's). An edge A -> B means a file of A includes a
header of B. A cycle is a strongly connected component of more than one module: the files a
reader cannot understand one layer at a time (src/README.md draws the layers).

The daemons' and tools' folders (OTHER_FOLDERS) get the cycle check too, each on its
own, with no allow-list: none of them has a cycle.

It fails on an edge between two modules of one cycle that
test/scripts/include_cycles.allow does not list. That file listed the edges inside the
cycles src/ had; it is empty now, so any cycle fails. It only shrinks: when a
change breaks an edge out of a cycle, this prints that its line can go.

The same for layers: each of src/README.md's layers is a folder of src/ (LAYERS below),
and a module's layer is its folder. An include of a header of a layer above fails unless
test/scripts/include_layers.allow lists it (today's, which only shrink), and so does a
module whose files are in no layer's folder.

  check_includes.py [REPO]            check (ctest: unit/test_include_layers)
  check_includes.py --graph [REPO]    also print every module's includes
  check_includes.py --write-allow [REPO]   rewrite both allow-lists from today's tree
"""
import pathlib
import re
import sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = {a for a in sys.argv[1:] if a.startswith("--")}
ROOT = pathlib.Path(args[0]) if args else pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
ALLOW = ROOT / "test/scripts/include_cycles.allow"
# The layers of src/README.md, lowest first; each is a folder of src/. A module may
# include headers of its own layer and the layers below. A module whose files are not
# all in one of these folders fails the check: place it.
LAYERS = {"client library": "client", "stores": "stores", "page-op core": "page_ops",
          "engine API": "engine"}
ALLOW_UP = ROOT / "test/scripts/include_layers.allow"
OTHER_FOLDERS = ["common", "server", "nbd", "ublk", "etcd", "tools", "plugins", "proto"]

# Headers named for no .c, and the .c whose functions they declare.
HEADER_OWNER = {"engine_internal": "engine", "client": "client_conn"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)\.h"', re.M)
FILES = sorted(SRC.rglob("*.[ch]"))
HEADERS = {p.stem for p in FILES if p.suffix == ".h"}


def module(stem):
    return HEADER_OWNER.get(stem, stem)


def folder_layer(path):
    rel = path.relative_to(SRC).parts
    names = {folder: name for name, folder in LAYERS.items()}
    return names.get(rel[0]) if len(rel) == 2 else None


# A module's layer is its files' folder; files of one module in two folders, or outside
# them, leave it unplaced.
_layers = {}
for _p in FILES:
    _layers.setdefault(module(_p.stem), set()).add(folder_layer(_p))
LAYER_OF = {m: next(iter(ls)) for m, ls in _layers.items() if len(ls) == 1 and None not in ls}
RANK = {m: list(LAYERS).index(layer) for m, layer in LAYER_OF.items()}


def graph(files=FILES, headers=HEADERS):
    edges = {module(p.stem): set() for p in files}
    for p in files:
        source = module(p.stem)
        for target in INCLUDE.findall(p.read_text()):
            if target in headers and module(target) != source:
                edges[source].add(module(target))
    return edges


def other_folder_cycles():
    """The cycles inside each of OTHER_FOLDERS, as (folder, modules)."""
    out = []
    for folder in OTHER_FOLDERS:
        files = sorted((ROOT / folder).glob("*.[ch]"))
        headers = {p.stem for p in files if p.suffix == ".h"}
        out += [(folder, comp) for comp in strongly_connected(graph(files, headers))]
    return out


def files_of(m):
    return [p for p in FILES if module(p.stem) == m]



def strongly_connected(edges):
    """Tarjan's algorithm, iterative: the components of more than one module."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.add(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def read_allow(path):
    allowed = set()
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                a, b = (s.strip() for s in line.split("->"))
                allowed.add((a, b))
    return allowed


def main():
    edges = graph()
    cycles = strongly_connected(edges)
    in_cycle = set()
    for comp in cycles:
        in_cycle |= {(a, b) for a in comp for b in edges[a] if b in comp}

    if "--graph" in flags:
        for m in sorted(edges):
            print(f"{m}: {' '.join(sorted(edges[m])) or '-'}")
        print()
    for comp in sorted(cycles, key=len, reverse=True):
        print(f"include cycle of {len(comp)} modules: {' '.join(sorted(comp))}")
    if not cycles:
        print("no include cycle in src/")

    unplaced = sorted(m for m in edges if m not in RANK)
    upward = {(a, b) for a in edges for b in edges[a]
              if a in RANK and b in RANK and RANK[b] > RANK[a]}

    if "--write-allow" in flags:
        ALLOW_UP.write_text(
            "# Includes of a header of a layer above (test/scripts/check_includes.py,\n"
            "# src/README.md's layers) today. Only ever delete lines. Empty: none is left.\n"
            + "".join(f"{a} -> {b}   # {LAYER_OF[a]} -> {LAYER_OF[b]}\n"
                      for a, b in sorted(upward)))
        print(f"wrote {len(upward)} edges to {ALLOW_UP.relative_to(ROOT)}")
        ALLOW.write_text(
            "# Include edges inside src/'s cycles today (test/scripts/check_includes.py).\n"
            "# Only ever delete lines: a change that adds an edge inside a cycle fails\n"
            "# unit/test_include_layers. Empty: no cycle is left.\n"
            + "".join(f"{a} -> {b}\n" for a, b in sorted(in_cycle)))
        print(f"wrote {len(in_cycle)} edges to {ALLOW.relative_to(ROOT)}")
        return 0

    allowed = read_allow(ALLOW)
    new = sorted(in_cycle - allowed)
    gone = sorted(allowed - in_cycle)
    for a, b in gone:
        print(f"no longer in a cycle: '{a} -> {b}': delete its line from "
              f"{ALLOW.relative_to(ROOT)}")
    for a, b in new:
        headers = [f"{s}.h" for s in [b] + [h for h, o in HEADER_OWNER.items() if o == b]]
        files = [f.name for f in files_of(a)
                 if any(f'"{h}"' in f.read_text() for h in headers)]
        print(f"NEW include cycle edge: {' / '.join(files)} includes {' or '.join(headers)}, "
              f"and {b} reaches {a} again: include a header of a lower layer instead "
              f"(src/README.md)")
    allowed_up = read_allow(ALLOW_UP)
    new_up = sorted(upward - allowed_up)
    for a, b in sorted(allowed_up - upward):
        print(f"no longer an include from a layer below: '{a} -> {b}': delete its line "
              f"from {ALLOW_UP.relative_to(ROOT)}")
    for a, b in new_up:
        print(f"NEW include of a layer above: {a} ({LAYER_OF[a]}) includes {b} "
              f"({LAYER_OF[b]}): move what it needs down, or pass it in (src/README.md)")
    for m in unplaced:
        print(f"NOT IN A LAYER: {m}: move its files into one folder of src/ (LAYERS in "
              f"test/scripts/check_includes.py), and add it to src/README.md's table")
    others = other_folder_cycles()
    for folder, comp in others:
        print(f"NEW include cycle in {folder}/: {' '.join(sorted(comp))}: pass what a "
              f"module needs in, rather than include the module that calls it")
    print(f"check_includes: {len(edges)} modules, {sum(map(len, edges.values()))} edges, "
          f"{len(cycles)} cycle(s), {len(in_cycle)} edges in cycles "
          f"({len(allowed)} allowed, {len(new)} new); {len(upward)} includes of a layer "
          f"above ({len(allowed_up)} allowed, {len(new_up)} new)")
    print(f"check_includes: {', '.join(OTHER_FOLDERS)}: {len(others)} cycle(s)")
    return 1 if new or new_up or unplaced or others else 0


if __name__ == "__main__":
    sys.exit(main())
