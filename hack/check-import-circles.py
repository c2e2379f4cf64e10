#!/usr/bin/env python3
"""Fail on an import circle between the files (top-level modules) of any crate.

Every `crate::<module>` a file names (in `use` lines or in paths, tests included; comments
are skipped) is an edge from that file's top-level module to `<module>`; a file under
`src/<module>/` counts as `<module>`. A strongly connected set of more than one module is a
circle, printed with its edges. `--self-test` checks the check on a planted circle.
"""
import re, sys, pathlib, tempfile

USE = re.compile(r"\bcrate::(\w+)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\}", re.S)


def circles(root):
    """Yield a line per circle found under `root`."""
    for src in sorted(root.glob("**/src")):
        yield from crate_circles(src)


def crate_circles(src):
    if "target" in src.parts or not src.is_dir():
        return
    mods = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src)
        top = rel.parts[0].removesuffix(".rs")
        if top in ("lib", "main") and len(rel.parts) == 1:
            continue
        if rel.parts[0] == "bin":
            continue
        text = f.read_text()
        # Strip line comments.
        text = re.sub(r"//[^\n]*", "", text)
        deps = set(USE.findall(text))
        for group in USE_GROUP.findall(text):
            deps.update(m.group(1) for m in re.finditer(r"(?:^|,)\s*(\w+)", group))
        mods.setdefault(top, set()).update(d for d in deps if d != top)
    graph = {m: {d for d in ds if d in mods} for m, ds in mods.items()}
    # Cycles: strongly connected components of more than one module.
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1:
                sccs.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    for comp in sccs:
        edges = [f"{a} -> {b}" for a in comp for b in sorted(graph[a]) if b in comp]
        yield f"{src}: import circle among {', '.join(comp)}: {'; '.join(edges)}"


def self_test():
    """A planted circle is found, and the same files without it pass."""
    with tempfile.TemporaryDirectory() as d:
        src = pathlib.Path(d, "planted", "src")
        (src / "stage").mkdir(parents=True)
        (src / "lib.rs").write_text("mod a; mod b; mod stage;\n")
        (src / "a.rs").write_text("use crate::b::B;\n// use crate::stage::Gone;\n")
        (src / "b.rs").write_text("pub struct B;\n")
        (src / "stage.rs").write_text("mod inner;\n")
        (src / "stage" / "inner.rs").write_text("use crate::{a, b::B};\n")
        if list(circles(pathlib.Path(d))):
            sys.exit("self-test: a circle reported where there is none")
        (src / "b.rs").write_text("pub struct B;\nfn f() { crate::stage::g() }\n")
        found = list(circles(pathlib.Path(d)))
        want = "import circle among a, b, stage"
        if len(found) != 1 or want not in found[0]:
            sys.exit(f"self-test: planted circle a -> b -> stage -> a not found: {found}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        print("check-import-circles: self-test found the planted circle")
        sys.exit(0)
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    found = list(circles(root))
    for line in found:
        print(line)
    sys.exit(1 if found else 0)
