#!/usr/bin/env python3
"""The call graph of the built tree, by defining file: no upward call, no folder cycle.

It reads the object files a build made (`nm` over BUILD/<folder>/CMakeFiles/*.dir/**.o,
tests and benchmarks left out). Each object's defined symbols (T, D, B, R, ...) belong
to the .c it was compiled from; each undefined one (U) is a call, or a reference, from
that .c to the file that defines it. A file's module is its folder: files that call each
other are one module, and a module is one folder.

Two rules, no allow-list:

- no cycle between folders, anywhere in the tree (src/'s folders, server/, nbd/, fuse/,
  ublk/, etcd/, tools/, plugins/, common/, proto/): a cycle is reported with every
  edge inside it;
- no call from a lower layer into a higher one. The layers are src/README.md's table
  ("| folder | layer | ..."), top first, the one place their order is written; the
  folders under it all (proto/, common/, etcd/) are in that table too.

Each finding names the calling file, the called file and the symbol.

  check_calls.py REPO BUILD            check (ctest: unit/test_call_layers)
  check_calls.py --graph REPO BUILD    also print every folder's calls into others
"""
import collections
import pathlib
import re
import subprocess
import sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = {a for a in sys.argv[1:] if a.startswith("--")}
if len(args) != 2:
    sys.exit("usage: check_calls.py [--graph] REPO BUILD")
ROOT = pathlib.Path(args[0]).resolve()
BUILD = pathlib.Path(args[1]).resolve()
SKIP = ("test", "bench")  # their objects call everything: they are not layers
# A row of the table: | [`engine/`](engine/README.md) | ..., or `../proto/`: paths from src/.
LAYER_ROW = re.compile(r"^\|\s*\[?`((?:\.\./)?[a-z_]+)/`\]?(?:\([^)]*\))?\s*\|", re.M)


def layers():
    """src/README.md's table of folders, top first, as repository paths."""
    text = (ROOT / "src/README.md").read_text()
    return [str(pathlib.PurePosixPath("src", f)).replace("src/../", "")
            for f in LAYER_ROW.findall(text)]


def source_of(obj):
    """The repository path of the .c an object was compiled from."""
    rel = obj.relative_to(BUILD)
    parts = rel.parts
    i = parts.index("CMakeFiles")
    inside = pathlib.PurePosixPath(*parts[i + 2:])  # below <target>.dir/
    src = pathlib.PurePosixPath(*parts[:i]) / inside
    return str(src).removesuffix(".o").replace("__/", "../")


def folder_of(src):
    return str(pathlib.PurePosixPath(src).parent)


def symbols():
    defined = {}  # symbol -> defining source
    objects = [o for o in BUILD.rglob("*.o")
               if "CMakeFiles" in o.parts and o.relative_to(BUILD).parts[0] not in SKIP]
    if not objects:
        sys.exit(f"check_calls: no object files under {BUILD}: build it first")
    sources = {}
    for obj in sorted(objects):
        src = source_of(obj)
        if (ROOT / src).exists() or (BUILD / src).exists():
            sources[str(obj)] = src  # else left from a file since moved or removed
    uses = {src: set() for src in sources.values()}  # source -> its undefined symbols
    # One nm for all objects each way; -A puts the object's path before each symbol.
    for flag, table in (("--defined-only", defined), ("--undefined-only", uses)):
        out = subprocess.run(["nm", "-A", "-g", flag, *sources], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            obj, _, rest = line.partition(":")  # object paths hold no colon
            sym = rest.split()[-1]
            src = sources[obj]
            if table is defined:
                defined.setdefault(sym, src)
            else:
                uses[src].add(sym)
    return defined, uses


def calls(defined, uses):
    """Folder -> folder -> [(caller file, callee file, symbol)], across folders only."""
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for src, syms in uses.items():
        for sym in sorted(syms):
            callee = defined.get(sym)
            if callee and folder_of(callee) != folder_of(src):
                edges[folder_of(src)][folder_of(callee)].append((src, callee, sym))
    return edges


def cycles(edges):
    """Strongly connected components of more than one folder (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    nodes = set(edges) | {w for v in edges for w in edges[v]}
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    order = layers()
    missing = [f for f in order if not (ROOT / f).is_dir()]
    if len(order) < 3 or missing:
        sys.exit(f"check_calls: src/README.md's layer table names {order}; "
                 f"not folders: {missing}")
    rank = {f: len(order) - i for i, f in enumerate(order)}  # higher layer, higher rank
    defined, uses = symbols()
    edges = calls(defined, uses)
    failures = []
    for caller in sorted(edges):
        for callee in sorted(edges[caller]):
            if caller in rank and callee in rank and rank[callee] > rank[caller]:
                for f, g, sym in edges[caller][callee]:
                    failures.append(f"upward call: {f} ({caller}) calls {sym} of {g} "
                                    f"({callee}), a layer above")
    src_unplaced = sorted({folder_of(s) for s in uses
                           if s.startswith("src/") and folder_of(s) not in rank})
    for folder in src_unplaced:
        failures.append(f"{folder}/ is in no layer: add it to src/README.md's table")
    for comp in cycles(edges):
        failures.append(f"cycle between folders {', '.join(sorted(comp))}:")
        for a in sorted(comp):
            for b in sorted(edges[a]):
                if b in comp:
                    for f, g, sym in edges[a][b]:
                        failures.append(f"  {f} calls {sym} of {g}")
    if "--graph" in flags:
        for caller in sorted(edges):
            for callee in sorted(edges[caller]):
                syms = sorted({s for _, _, s in edges[caller][callee]})
                print(f"{caller} -> {callee}: {' '.join(syms)}")
    nedges = sum(len(v) for v in edges.values())
    print(f"check_calls: {len(uses)} files, {nedges} calling folder pairs; layers, top "
          f"first: {' > '.join(order)}")
    for line in failures:
        print(line)
    if failures:
        print("check_calls: FAILED: a lower layer must not call a higher one, and files "
              "that call each other belong in one folder (CONTRIBUTING.md, the layer rule)")
        return 1
    print("check_calls: no upward call, no cycle between folders")
    return 0


sys.exit(main())
