#!/usr/bin/env python3
"""Checks that the folders of the library form layers: no include cycle between folders.

Reads every `#include "..."` in src/, cuda/ and include/, maps each file to its folder
(src/<x>, cuda with its subfolders, include/tapegrad/<x>, include/tapegrad for the umbrella
headers) and fails, listing the cycles, when the folder graph has one that is not an allowed
exception below. A public header folder is a folder of its own: src/ops implements
include/tapegrad/ops, and the headers of one public folder may include those of another.

  python3 tools/check_layers.py            check (exit 1 on a cycle)
  python3 tools/check_layers.py --print    also print the layers, bottom to top, and the edges
  python3 tools/check_layers.py --doc      print the layers as docs/architecture.md shows them
  python3 tools/check_layers.py --check-doc  check that docs/architecture.md shows them (exit 1 if not)
  python3 tools/check_layers.py --self-test  check the checker on small in-memory graphs

No dependencies beyond the standard library.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = ("src", "cuda", "include")
SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".def", ".inc")
# Where `#include "x"` is looked up, after the including file's own folder (the target's include
# directories in CMakeLists.txt).
INCLUDE_DIRS = ("src", "include", ".")

# Folder edges (from, to) that may close a cycle, each with its reason. Ideally empty.
ALLOWED = {
    # ("src/x", "src/y"): "why x may include y although y includes x",
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def layer_of(path):
    """The layer of a repository-relative file path (with / separators), or None if not scanned."""
    parts = path.split("/")
    if parts[0] == "cuda":
        return "cuda"
    if parts[0] == "src" and len(parts) >= 3:
        return "src/" + parts[1]
    if parts[0] == "src":
        return "src"
    if parts[0] == "include" and len(parts) >= 4 and parts[1] == "tapegrad":
        return "include/tapegrad/" + parts[2]
    if parts[0] == "include":
        return "include/tapegrad"
    return None


def resolve(including, target, exists):
    """The repository-relative path `#include "target"` in file `including` names, or None."""
    here = os.path.dirname(including)
    for base in (here,) + INCLUDE_DIRS:
        candidate = os.path.normpath(os.path.join(base, target)).replace(os.sep, "/")
        if exists(candidate):
            return candidate
    return None


def scan(root):
    """Maps each scanned file to the repository-relative files it includes (unresolved ones dropped)."""
    files = {}
    for top in SCANNED:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if name.endswith(SUFFIXES):
                    full = os.path.join(dirpath, name)
                    files[os.path.relpath(full, root).replace(os.sep, "/")] = full
    includes = {}
    for rel, full in files.items():
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        targets = []
        for target in INCLUDE_RE.findall(text):
            resolved = resolve(rel, target, lambda p: p in files)
            if resolved is not None:
                targets.append(resolved)
        includes[rel] = targets
    return includes


def folder_graph(includes):
    """{layer: {layer: [(file, included file), ...]}} without self edges."""
    graph = {}
    for src, targets in includes.items():
        a = layer_of(src)
        if a is None:
            continue
        graph.setdefault(a, {})
        for dst in targets:
            b = layer_of(dst)
            if b is None or b == a:
                continue
            graph[a].setdefault(b, []).append((src, dst))
            graph.setdefault(b, {})
    return graph


def strongly_connected(graph):
    """The strongly connected components of `graph` (Tarjan), each a sorted list of nodes."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # Iterative, so a deep graph cannot exhaust Python's recursion limit.
        work = [(v, iter(sorted(graph.get(v, {}))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def without_allowed(graph, allowed):
    return {a: {b: why for b, why in edges.items() if (a, b) not in allowed} for a, edges in graph.items()}


def cycles(graph, allowed):
    """The folder cycles not excused by `allowed`: a list of strongly connected components."""
    return [c for c in strongly_connected(without_allowed(graph, allowed)) if len(c) > 1]


def layers(graph, allowed):
    """The folders bottom to top: each one's level is one above the highest folder it includes."""
    g = without_allowed(graph, allowed)
    level = {}

    def depth(v, seen=()):
        if v in level:
            return level[v]
        if v in seen:
            return 0
        level[v] = 1 + max([depth(w, seen + (v,)) for w in g.get(v, {})], default=-1)
        return level[v]

    for v in g:
        depth(v)
    return sorted(g, key=lambda v: (level[v], v)), level


def report_cycles(graph, found):
    lines = []
    for comp in found:
        lines.append("include cycle between folders: " + " <-> ".join(comp))
        members = set(comp)
        for a in comp:
            for b in sorted(graph[a]):
                if b in members:
                    src, dst = graph[a][b][0]
                    more = len(graph[a][b]) - 1
                    extra = " (and %d more)" % more if more else ""
                    lines.append("  %s -> %s: %s includes \"%s\"%s" % (a, b, src, dst, extra))
    return "\n".join(lines)


def print_graph(graph, allowed):
    order, level = layers(graph, allowed)
    print("layers, bottom to top (a folder includes only folders on earlier lines):")
    for v in order:
        deps = sorted(graph[v])
        print("  %d %-26s -> %s" % (level[v], v, ", ".join(deps) if deps else "(nothing)"))
    if allowed:
        print("allowed exceptions:")
        for (a, b), why in sorted(allowed.items()):
            print("  %s -> %s: %s" % (a, b, why))


DOC = os.path.join(ROOT, "docs", "architecture.md")
DOC_OPEN = "<!-- layers: generated by python3 tools/check_layers.py --doc -->\n"
DOC_CLOSE = "<!-- end of the generated layers -->"


def doc_block(graph, allowed):
    """The layers as docs/architecture.md shows them: one line per level, bottom to top."""
    order, level = layers(graph, allowed)
    lines = []
    for n in range(max(level.values()) + 1 if level else 0):
        folders = ", ".join("`%s`" % v for v in order if level[v] == n)
        lines.append("%d. %s" % (n + 1, folders))
    lines.append("")
    if allowed:
        lines.append("Allowed exceptions (edges that may close a cycle):")
        for (a, b), why in sorted(allowed.items()):
            lines.append("- `%s` -> `%s`: %s" % (a, b, why))
    else:
        lines.append("Allowed exceptions: none.")
    return "\n".join(lines) + "\n"


def check_doc(graph, allowed):
    """0 when docs/architecture.md's generated block is the current one, else 1 with the fix."""
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    start = doc.find(DOC_OPEN)
    end = doc.find(DOC_CLOSE, start)
    want = doc_block(graph, allowed)
    if start < 0 or end < 0:
        print("check_layers: docs/architecture.md has no block between %r and %r" % (DOC_OPEN.strip(), DOC_CLOSE),
              file=sys.stderr)
        return 1
    if doc[start + len(DOC_OPEN):end] != want:
        print("check_layers: docs/architecture.md's layers are out of date; between its markers put the output "
              "of python3 tools/check_layers.py --doc:\n" + want, file=sys.stderr)
        return 1
    print("check_layers: docs/architecture.md shows the current layers")
    return 0


def self_test():
    failures = []
    # A tiny tree with a cycle src/a -> src/b -> src/a, and an acyclic part.
    includes = {
        "src/a/x.h": ["src/b/y.h"],
        "src/b/y.h": ["include/tapegrad/core/t.h"],
        "src/b/y.cpp": ["src/b/y.h", "src/a/x.h"],
        "include/tapegrad/core/t.h": [],
        "src/core/t.cpp": ["include/tapegrad/core/t.h"],
        "cuda/k/z.cu": ["src/b/y.h"],
    }
    graph = folder_graph(includes)
    found = cycles(graph, {})
    if found != [["src/a", "src/b"]]:
        failures.append("expected the cycle src/a <-> src/b, got %r" % (found,))
    text = report_cycles(graph, found)
    if "src/b/y.cpp includes \"src/a/x.h\"" not in text:
        failures.append("the report does not name the offending include:\n" + text)
    if cycles(graph, {("src/b", "src/a"): "test"}):
        failures.append("an allowed edge still reports its cycle")
    includes["src/b/y.cpp"] = ["src/b/y.h"]
    if cycles(folder_graph(includes), {}):
        failures.append("an acyclic graph reports a cycle")
    # A longer cycle through three folders.
    three = {"src/p/a.h": ["src/q/b.h"], "src/q/b.h": ["src/r/c.h"], "src/r/c.h": ["src/p/a.h"]}
    if cycles(folder_graph(three), {}) != [["src/p", "src/q", "src/r"]]:
        failures.append("a three-folder cycle is not reported")
    # The mapping of paths to layers.
    for path, want in (("src/cpu/gemm/x.cpp", "src/cpu"), ("cuda/distributed/n.cpp", "cuda"),
                       ("include/tapegrad/ops/ops.h", "include/tapegrad/ops"),
                       ("include/tapegrad/tapegrad.h", "include/tapegrad")):
        if layer_of(path) != want:
            failures.append("layer_of(%s) = %s, expected %s" % (path, layer_of(path), want))
    for f in failures:
        print("check_layers self-test: FAIL: " + f, file=sys.stderr)
    if not failures:
        print("check_layers self-test: ok (a planted cycle is reported)")
    return 1 if failures else 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    graph = folder_graph(scan(ROOT))
    if "--print" in argv:
        print_graph(graph, ALLOWED)
        sys.stdout.flush()
    found = cycles(graph, ALLOWED)
    if "--doc" in argv and not found:
        sys.stdout.write(doc_block(graph, ALLOWED))
        return 0
    if "--check-doc" in argv and not found:
        return check_doc(graph, ALLOWED)
    if found:
        print(report_cycles(graph, found), file=sys.stderr)
        print("check_layers: FAIL: the folders above include each other; move the shared part down "
              "(or, if it must stay, list the edge in ALLOWED in tools/check_layers.py with its reason)",
              file=sys.stderr)
        return 1
    print("check_layers: ok, %d folders, no include cycle between them" % len(graph))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
