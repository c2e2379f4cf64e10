#!/usr/bin/env python3
"""The release's own steps, run by .github/workflows/release.yaml, and `make release-check`,
the dry run of them that CI runs on every commit.

  release.py version                      the release version (crates/controller/Cargo.toml)
  release.py env                          KEY=VALUE lines for $GITHUB_ENV (hack/release.env + VERSION)
  release.py pack --target T --binary B --out DIR
                                          kubectl-mkv-v<version>-T.tar.gz (.zip on windows) holding
                                          B as kubectl-mkv(.exe), and its .sha256
  release.py krew --dist DIR --out FILE   the krew manifest, filled from the archives in DIR
  release.py notes [VERSION]              the CHANGELOG.md section of VERSION (the release notes)
  release.py check [--tag vX.Y.Z] --rendered FILE... --plugin-binary B
                                          the dry run: versions agree, every image a manifest names
                                          is one the release builds (or the pinned member image),
                                          the krew manifest is the one generated from archives
                                          packed here, the changelog has the version's section
  release.py --self-test --rendered-cmd SCRIPT --plugin-binary B
                                          plants each mistake the check must catch and checks it fails

`hack/release-check.sh` renders the manifests (kubectl kustomize, helm template) and calls
`check`; nothing here talks to a registry or to GitHub.
"""
import argparse
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

# krew's selector of each target the release builds.
PLATFORM = {
    "x86_64-unknown-linux-musl": ("linux", "amd64"),
    "aarch64-unknown-linux-musl": ("linux", "arm64"),
    "x86_64-apple-darwin": ("darwin", "amd64"),
    "aarch64-apple-darwin": ("darwin", "arm64"),
    "x86_64-pc-windows-msvc": ("windows", "amd64"),
    "aarch64-pc-windows-msvc": ("windows", "arm64"),
}
SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")


class Mistake(Exception):
    """What a release would get wrong: the check prints it and fails."""


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def release_env(root):
    env = {}
    for line in read(root, "hack/release.env").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return env


def crate_version(root, crate="crates/controller"):
    m = re.search(r'^version = "([^"]+)"$', read(root, f"{crate}/Cargo.toml"), re.M)
    if not m:
        raise Mistake(f"{crate}/Cargo.toml: no version")
    return m.group(1)


def is_windows(target):
    return "windows" in target


def archive_name(version, target):
    ext = "zip" if is_windows(target) else "tar.gz"
    return f"kubectl-mkv-v{version}-{target}.{ext}"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pack(version, target, binary, out):
    """One archive per target, holding the binary alone at its root (what krew installs)."""
    if target not in PLATFORM:
        raise Mistake(f"pack: {target} is not a release target ({', '.join(PLATFORM)})")
    os.makedirs(out, exist_ok=True)
    name = archive_name(version, target)
    path = os.path.join(out, name)
    inner = "kubectl-mkv.exe" if is_windows(target) else "kubectl-mkv"
    with open(binary, "rb") as f:
        data = f.read()
    # Fixed times and modes: the same binary packs to the same bytes.
    if is_windows(target):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
            info = zipfile.ZipInfo(inner, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    else:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
            info = tarfile.TarInfo(inner)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            t.addfile(info, io.BytesIO(data))
        with open(path, "wb") as f:
            f.write(gzip.compress(raw.getvalue(), compresslevel=6, mtime=0))
    with open(path + ".sha256", "w", encoding="utf-8") as f:
        f.write(f"{sha256(path)}  {name}\n")
    return path


def krew_manifest(root, version, dist):
    """deploy/krew/mkv.yaml with VERSION, OWNER_REPO and each SHA256_<TARGET> filled in from
    the archives in `dist` (every placeholder must be filled: a missing archive is a mistake)."""
    env = release_env(root)
    text = read(root, "deploy/krew/mkv.yaml")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("#")) + "\n"
    text = text.replace("VERSION", version).replace("OWNER_REPO", env["RELEASE_GITHUB_REPO"])
    for target in env["RELEASE_PLUGIN_TARGETS"].split(","):
        path = os.path.join(dist, archive_name(version, target))
        if not os.path.exists(path):
            raise Mistake(f"krew: no archive {archive_name(version, target)} in {dist}")
        text = text.replace(f"SHA256_{target.upper().replace('-', '_')}", sha256(path))
    left = re.findall(r"\b(?:SHA256_[A-Z0-9_]+|VERSION|OWNER_REPO)\b", text)
    if left:
        raise Mistake(f"krew: placeholders left unfilled: {', '.join(sorted(set(left)))}")
    return text


def krew_platforms(manifest):
    """Each platform of a krew manifest as a dict (os, arch, uri, sha256, bin, from)."""
    platforms, cur = [], None
    for line in manifest.splitlines():
        if re.match(r"^\s*- selector:", line):
            cur = {}
            platforms.append(cur)
            continue
        m = re.match(r"^\s*-?\s*(os|arch|uri|sha256|bin|from):\s*(\S+)\s*$", line)
        if m and cur is not None:
            cur[m.group(1)] = m.group(2)
    return platforms


def archive_members(path):
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            return set(z.namelist())
    with tarfile.open(path) as t:
        return set(t.getnames())


def check_krew(root, version, manifest, dist):
    """The manifest is exactly what the archives in `dist` make: one platform per release target,
    each naming its archive at the release's download URL, with that archive's checksum, and
    the binary krew links from it inside it."""
    env = release_env(root)
    targets = env["RELEASE_PLUGIN_TARGETS"].split(",")
    m = re.search(r"^\s*version:\s*(\S+)\s*$", manifest, re.M)
    if not m or m.group(1) != f"v{version}":
        raise Mistake(f"krew manifest: version {m.group(1) if m else 'missing'}, not v{version}")
    base = f"https://github.com/{env['RELEASE_GITHUB_REPO']}/releases/download/v{version}/"
    platforms = krew_platforms(manifest)
    if len(platforms) != len(targets):
        raise Mistake(f"krew manifest: {len(platforms)} platforms, the release builds {len(targets)}")
    seen = set()
    for p in platforms:
        uri = p.get("uri", "")
        if not uri.startswith(base):
            raise Mistake(f"krew manifest: {uri} is not under the release's downloads {base}")
        name = uri[len(base):]
        target = next((t for t in targets if name == archive_name(version, t)), None)
        if target is None:
            raise Mistake(f"krew manifest: {name} is not an archive the release builds")
        if (p.get("os"), p.get("arch")) != PLATFORM[target]:
            raise Mistake(f"krew manifest: {name} is selected for {p.get('os')}/{p.get('arch')}")
        path = os.path.join(dist, name)
        if not os.path.exists(path):
            raise Mistake(f"krew manifest: {name} was not built")
        if p.get("sha256") != sha256(path):
            raise Mistake(f"krew manifest: the sha256 of {name} is {p.get('sha256')}, the archive's is {sha256(path)}")
        inside = archive_members(path)
        if p.get("from") not in inside or p.get("bin") != p.get("from"):
            raise Mistake(f"krew manifest: {name} holds {sorted(inside)}, the manifest links {p.get('bin')}")
        seen.add(target)
    if seen != set(targets):
        raise Mistake(f"krew manifest: no platform for {', '.join(sorted(set(targets) - seen))}")


def changelog_section(root, version):
    text = read(root, "CHANGELOG.md")
    m = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|\Z)", text, re.M | re.S)
    return m


def check_versions(root, version, tag):
    if not SEMVER.match(version):
        raise Mistake(f"crates/controller/Cargo.toml: version {version} is not semver")
    for crate in ("crates/kubectl-mkv", "crates/api", "crates/core"):
        if crate_version(root, crate) != version:
            raise Mistake(f"{crate}/Cargo.toml: version {crate_version(root, crate)}, the operator's is {version}")
    chart = read(root, "deploy/helm/marekvs-operator/Chart.yaml")
    for field in ("version", "appVersion"):
        m = re.search(rf'^{field}: "?([^"\n]+)"?$', chart, re.M)
        got = m.group(1) if m else "missing"
        if got != version:
            raise Mistake(f"Chart.yaml: {field} {got}, the operator crate's is {version}")
    for rel in ["deploy/kustomization.yaml"] + sorted(
        f"deploy/overlays/{d}/kustomization.yaml" for d in os.listdir(os.path.join(root, "deploy/overlays"))
    ):
        for tag_found in re.findall(r"^\s*newTag:\s*\"?([^\"\n]+)\"?$", read(root, rel), re.M):
            if tag_found != version:
                raise Mistake(f"{rel}: newTag {tag_found}, the operator crate's is {version}")
    if tag is not None:
        if tag != f"v{version}":
            raise Mistake(f"the tag {tag} is not v{version}, the version of the crates and the chart")
        m = changelog_section(root, version)
        if not m or not re.match(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", m.group(0).splitlines()[0]):
            raise Mistake(f"CHANGELOG.md: no dated section `## [{version}] - YYYY-MM-DD` for the tag")
        if not m.group(1).strip():
            raise Mistake(f"CHANGELOG.md: the section of {version} is empty")
    else:
        text = read(root, "CHANGELOG.md")
        if not re.search(rf"^## \[(?:Unreleased|{re.escape(version)})\]", text, re.M):
            raise Mistake(f"CHANGELOG.md: neither an [Unreleased] section nor one for {version}")


IMAGE_LINE = re.compile(r"^\s*(?:-\s+)?image:\s*[\"']?([^\"'\s]+)[\"']?\s*$", re.M)


def check_images(root, version, rendered):
    """Every image a shipped manifest names: the operator's at exactly the release version, or
    the pinned member image; anything else the release would not build."""
    env = release_env(root)
    want = f"{env['RELEASE_IMAGE']}:{version}"
    member = env["RELEASE_MEMBER_IMAGE"]
    if member.endswith(":latest") or ":" not in member.rsplit("/", 1)[-1]:
        raise Mistake(f"hack/release.env: the member image {member} is not pinned")
    found = 0
    for label, text in rendered:
        for image in IMAGE_LINE.findall(text):
            found += 1
            if image in (want, member):
                continue
            raise Mistake(f"{label}: names the image {image}; the release builds {want} (and the examples run {member})")
        if not IMAGE_LINE.search(text):
            raise Mistake(f"{label}: names no image at all (was it rendered?)")
    return found


def check_workflow(root):
    """The workflow builds the plugin for exactly the targets the krew manifest is made for."""
    workflow = read(root, ".github/workflows/release.yaml")
    built = re.findall(r"^\s*- target:\s*(\S+)\s*$", workflow, re.M)
    targets = release_env(root)["RELEASE_PLUGIN_TARGETS"].split(",")
    if sorted(built) != sorted(targets):
        raise Mistake(f"release.yaml builds the plugin for {', '.join(built)}; hack/release.env names {', '.join(targets)}")
    for step in ("make release-check RELEASE_TAG=", "hack/release.py pack", "hack/release.py krew", "hack/release.py notes"):
        if step not in workflow:
            raise Mistake(f"release.yaml does not run `{step}`")


def cmd_check(args):
    root = args.root
    version = crate_version(root)
    check_versions(root, version, args.tag)
    check_workflow(root)
    rendered = []
    for path in args.rendered:
        with open(path, encoding="utf-8") as f:
            rendered.append((os.path.basename(path), f.read()))
    images = check_images(root, version, rendered)
    with tempfile.TemporaryDirectory() as dist:
        # The host's build stands in for every target's binary: what is checked is that the
        # manifest is generated from the archives as packed, not what the binaries run on.
        for target in release_env(root)["RELEASE_PLUGIN_TARGETS"].split(","):
            pack(version, target, args.plugin_binary, dist)
        manifest = krew_manifest(root, version, dist)
        check_krew(root, version, manifest, dist)
        archives = len(os.listdir(dist)) // 2
    print(f"release-check: version {version}; {images} image references in {len(rendered)} rendered manifests; "
          f"krew manifest checked against {archives} archives")


# Each planted mistake: (what it is, the file, a function editing its text, what the check must say).
PLANTS = [
    ("the chart's version differs from the crate's", "deploy/helm/marekvs-operator/Chart.yaml",
     lambda t: re.sub(r"^version: .*$", "version: 9.9.9", t, flags=re.M), "Chart.yaml: version 9.9.9"),
    ("deploy/ names a tag apart from the version", "deploy/kustomization.yaml",
     lambda t: re.sub(r"newTag: .*", "newTag: 0.0.1-dev", t), "newTag 0.0.1-dev, the operator crate's is"),
    ("the chart's values name a tag the release does not build", "deploy/helm/marekvs-operator/values.yaml",
     lambda t: t.replace('tag: ""', 'tag: "0.1.0-dev"', 1), "names the image ghcr.io/marekvs/marekvs-operator:0.1.0-dev"),
    ("an example runs the member image at :latest", "deploy/examples/demo.yaml",
     lambda t: re.sub(r"image: .*", "image: ghcr.io/yannick/marekvs:latest", t, count=1), "names the image ghcr.io/yannick/marekvs:latest"),
    ("the krew manifest holds a checksum not taken from the archive", "deploy/krew/mkv.yaml",
     lambda t: t.replace("SHA256_X86_64_APPLE_DARWIN", "0" * 64, 1), "the sha256 of kubectl-mkv-v"),
    ("the krew manifest names an archive the release does not build", "deploy/krew/mkv.yaml",
     lambda t: t.replace("x86_64-unknown-linux-musl.tar.gz", "x86_64-unknown-linux-gnu.tar.gz", 1),
     "is not an archive the release builds"),
]


def self_test(args):
    """Each planted mistake, in a copy of the repository's release inputs, fails the check with
    its message; the unplanted copy passes. A small stand-in takes the plugin's place: what is
    planted is in the manifests, not in the binary."""
    keep = ["crates", "deploy", "hack", "docs", "README.md", "CHANGELOG.md", ".github"]
    failures = 0
    stand_in = tempfile.NamedTemporaryFile("w", suffix="-kubectl-mkv", delete=False)
    stand_in.write("#!/bin/sh\necho kubectl-mkv stand-in\n")
    stand_in.close()
    os.chmod(stand_in.name, 0o755)
    args.plugin_binary = stand_in.name
    for plant in [None] + PLANTS:
        with tempfile.TemporaryDirectory() as tmp:
            for item in keep:
                src = os.path.join(args.root, item)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(tmp, item), ignore=shutil.ignore_patterns("target", "*.rs"))
                else:
                    shutil.copy(src, os.path.join(tmp, item))
            if plant:
                what, rel, edit, _ = plant
                path = os.path.join(tmp, rel)
                with open(path, encoding="utf-8") as f:
                    old = f.read()
                new = edit(old)
                if new == old:
                    print(f"self-test: planting '{what}' changed nothing in {rel}", file=sys.stderr)
                    failures += 1
                    continue
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
            run = subprocess.run([args.rendered_cmd, "--one", tmp, args.plugin_binary], capture_output=True, text=True)
            out = run.stdout + run.stderr
            if plant is None:
                ok = run.returncode == 0
                print(f"self-test: unplanted copy {'passes' if ok else 'FAILS: ' + out.strip()}")
            else:
                ok = run.returncode != 0 and plant[3] in out
                print(f"self-test: {plant[0]}: {'caught' if ok else 'NOT caught: ' + out.strip()}")
            failures += not ok
    if failures:
        sys.exit(f"self-test: {failures} of {len(PLANTS) + 1} cases wrong")
    print(f"self-test: all {len(PLANTS)} planted mistakes caught")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.dirname(HERE))
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--rendered-cmd", help="self-test: the script that renders and checks a copy (SCRIPT --one ROOT BINARY)")
    p.add_argument("--plugin-binary")
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("version")
    sub.add_parser("env")
    pk = sub.add_parser("pack")
    pk.add_argument("--target", required=True)
    pk.add_argument("--binary", required=True)
    pk.add_argument("--out", required=True)
    kr = sub.add_parser("krew")
    kr.add_argument("--dist", required=True)
    kr.add_argument("--out", required=True)
    nt = sub.add_parser("notes")
    nt.add_argument("version", nargs="?")
    ck = sub.add_parser("check")
    ck.add_argument("--tag")
    ck.add_argument("--rendered", nargs="+", required=True)
    ck.add_argument("--plugin-binary", dest="plugin_binary", required=True)
    args = p.parse_args()
    root = args.root
    try:
        if args.self_test:
            return self_test(args)
        if args.cmd == "version":
            print(crate_version(root))
        elif args.cmd == "env":
            for key, value in release_env(root).items():
                print(f"{key}={value}")
            print(f"VERSION={crate_version(root)}")
        elif args.cmd == "pack":
            print(pack(crate_version(root), args.target, args.binary, args.out))
        elif args.cmd == "krew":
            version = crate_version(root)
            manifest = krew_manifest(root, version, args.dist)
            check_krew(root, version, manifest, args.dist)
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(manifest)
        elif args.cmd == "notes":
            version = args.version or crate_version(root)
            m = changelog_section(root, version)
            if not m or not m.group(1).strip():
                raise Mistake(f"CHANGELOG.md: no section for {version}")
            print(m.group(1).strip())
        elif args.cmd == "check":
            cmd_check(args)
        else:
            p.print_help()
            return 2
    except Mistake as e:
        sys.exit(f"release-check: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
