#!/usr/bin/env python3
"""Every relative link in the README and docs/ must lead somewhere: to a file or directory of
the repository, and, for a link into a Markdown file with `#anchor`, to one of its headings
(GitHub's anchor rules). In docs/architecture.md, every source path written in backticks must
be a link, so that a newcomer reaches every stage and rule in one click.

Usage: check-doc-links.py [ROOT]       check the repository at ROOT (default .)
       check-doc-links.py --self-test  check that planted mistakes are found
"""
import os
import re
import sys
import tempfile

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)
# A source path in backticks: ends in .rs/.py/.sh (optionally `::item`) or is a directory `x/`.
SOURCE = re.compile(r"(?<!\[)`([^`\s]+\.(?:rs|py|sh)(?:::[^`\s]*)?|[^`\s]+/)`(?!\]\()")


def anchors(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    out, seen = set(), {}
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    for line in text.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def check_file(root, rel, one_click):
    path = os.path.join(root, rel)
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            problems.append(f"{rel}: link to {target}: no such file")
            continue
        if anchor and dest.endswith(".md") and anchor not in anchors(dest):
            problems.append(f"{rel}: link to {target}: no such heading")
    if one_click:
        for tok in SOURCE.findall(text):
            problems.append(f"{rel}: `{tok}` is a source path but not a link")
    return problems


def check(root):
    files = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md")
    )
    problems = []
    for rel in files:
        if os.path.exists(os.path.join(root, rel)):
            problems += check_file(root, rel, rel == os.path.join("docs", "architecture.md"))
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "src"))
        open(os.path.join(root, "src", "a.rs"), "w").close()
        with open(os.path.join(root, "docs", "other.md"), "w") as f:
            f.write("# Other\n\n## The hand-off gate\n")
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("[ok](docs/other.md#the-hand-off-gate) [ok](src/a.rs) [web](https://x.y)\n")
        with open(os.path.join(root, "docs", "architecture.md"), "w") as f:
            f.write("[`a.rs`](../src/a.rs)\n")
        assert check(root) == [], check(root)
        with open(os.path.join(root, "README.md"), "a") as f:
            f.write("[gone](docs/gone.md) [anchor](docs/other.md#no-such)\n")
        with open(os.path.join(root, "docs", "architecture.md"), "a") as f:
            f.write("see `src/a.rs::f` and `src/`\n```\n`not/checked.rs`\n```\n")
        found = check(root)
        want = [
            "README.md: link to docs/gone.md: no such file",
            "README.md: link to docs/other.md#no-such: no such heading",
            "docs/architecture.md: `src/a.rs::f` is a source path but not a link",
            "docs/architecture.md: `src/` is a source path but not a link",
        ]
        assert found == want, found
    print("check-doc-links: self-test found the 4 planted mistakes")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check-doc-links: {len(problems)} broken", file=sys.stderr)
        sys.exit(1)
    docs = [os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs"))]
    texts = [FENCE.sub("", open(f, encoding="utf-8").read()) for f in docs if f.endswith(".md")]
    links = sum(len(LINK.findall(t)) for t in texts)
    print(f"check-doc-links: every link leads somewhere ({links} links in {len(texts)} docs, and the README's)")
