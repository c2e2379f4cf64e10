#!/usr/bin/env python3
"""Runs the e2e suite's tests across its test binaries, each test in a process of its own,
JOBS at a time, longest first.

cargo runs test binaries one after another, each a barrier: a binary holding one long test
kept every other slot idle. Here every test of every binary is one job in one queue:

- Tests of a binary named with --exclusive change what the whole cluster sees (the API server
  restarted, an older CRD applied, an operator installed for every namespace). They run first
  (or last, those that --await a build), one binary at a time, with nothing else beside them;
  the tests of one such binary run beside each other, as they always have.
- Every other test runs beside any other, longest first by the durations file (a test it does
  not list counts as the longest). Each test has its own namespace and operator; what tests
  share (the one Lease the operator's RBAC allows, the CRD the install tests change) is guarded
  by file locks every test process sees (e2e/src/lib.rs, ClusterLock).

Each test's output is printed whole when it ends, so tests never interleave, and ends with the
runner's own "test result:" line, which hack/test-e2e.sh sums. A skipped test (a need not met
here) prints its reason and counts as ignored, as it does under cargo.

  hack/run-e2e.py [--jobs N] [--exclusive a,b] [--await FILE=READY]... [--durations FILE]
                  [--record FILE] BIN... [-- FILTER...]

--await FILE=READY (repeatable) holds the tests of binary FILE until the file READY exists:
hack/test-e2e.sh builds what only some tests need (helm, the operator at the pinned commit) in
the background and writes READY when the build ends, "ok" or its error. The other tests run
meanwhile: the exclusive binaries that await nothing run first, those that await a build run
last. A build that failed fails the tests that awaited it, with its error.

--record writes each test's wall time, to refresh the durations file.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time


def listed(binary, filters):
    """The tests of one binary that the filters select (the suite's runner applies them)."""
    out = subprocess.run(
        [binary, "--list", *filters],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line[: -len(": test")] for line in out.splitlines() if line.endswith(": test")]


def run_one(binary, name):
    """Run one test alone; its whole output, whether it passed, and its wall time."""
    started = time.monotonic()
    proc = subprocess.run(
        [binary, "--exact", name, "--test-threads", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    )
    return proc.stdout, proc.returncode == 0, time.monotonic() - started


# A cold build of what a test awaits takes minutes; a builder that died without a word, forever.
READY_WITHIN_S = 45 * 60


def wait_ready(files):
    """Wait until each READY file exists: None when each says ok, else what failed."""
    for ready in files:
        if not os.path.exists(ready):
            print(f"run-e2e: waiting for {ready}", flush=True)
            waited = time.monotonic()
            while not os.path.exists(ready):
                if time.monotonic() - waited > READY_WITHIN_S:
                    return f"{ready}: not written within {READY_WITHIN_S}s"
                time.sleep(1)
            print(f"run-e2e: {ready} after {time.monotonic() - waited:.0f}s", flush=True)
        with open(ready) as f:
            said = f.read().strip()
        if said != "ok":
            return f"{ready}: {said}"
    return None


class Pool:
    """JOBS workers over a queue; prints each test's output as it ends."""

    def __init__(self, jobs):
        self.jobs = jobs
        self.lock = threading.Lock()
        self.results = []

    def fail(self, queue, error):
        """Count each test of the queue failed, without running it."""
        for binary, name in queue:
            label = f"{os.path.basename(binary).rsplit('-', 1)[0]}::{name}"
            sys.stdout.write(f"\n===== {label} (FAILED, not run)\n{error}\n")
            sys.stdout.write("test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n")
            self.results.append((label, name, False, 0.0))
        sys.stdout.flush()

    def run(self, queue):
        queue = list(queue)
        cursor = threading.Lock()

        def worker():
            while True:
                with cursor:
                    if not queue:
                        return
                    binary, name = queue.pop(0)
                output, ok, secs = run_one(binary, name)
                label = f"{os.path.basename(binary).rsplit('-', 1)[0]}::{name}"
                with self.lock:
                    sys.stdout.write(f"\n===== {label} ({'ok' if ok else 'FAILED'}, {secs:.1f}s)\n")
                    sys.stdout.write(output)
                    sys.stdout.flush()
                    self.results.append((label, name, ok, secs))

        threads = [threading.Thread(target=worker) for _ in range(min(self.jobs, len(queue)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def main():
    argv = sys.argv[1:]
    filters = []
    if "--" in argv:
        i = argv.index("--")
        argv, filters = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--exclusive", default="", help="binaries (by test file name) whose tests run with nothing else")
    p.add_argument("--durations", help="JSON: test name -> seconds, for the order")
    p.add_argument("--record", help="write each test's wall time here (JSON)")
    p.add_argument("--await", dest="awaits", action="append", default=[], metavar="FILE=READY",
                   help="hold the tests of binary FILE until the file READY exists")
    p.add_argument("binaries", nargs="+")
    args = p.parse_args(argv)

    hints = {}
    if args.durations and os.path.exists(args.durations):
        with open(args.durations) as f:
            hints = json.load(f)
    unknown = max(hints.values(), default=0) + 1
    exclusive = {b for b in args.exclusive.split(",") if b}

    def file_of(binary):
        # cargo names a test binary <file>-<hash>.
        return os.path.basename(binary).rsplit("-", 1)[0]

    awaits = {}
    for a in args.awaits:
        stem, _, ready = a.partition("=")
        if not ready:
            p.error(f"--await {a}: FILE=READY")
        awaits.setdefault(stem, []).append(ready)

    groups, shared = [], []
    for binary in args.binaries:
        tests = [(binary, t) for t in listed(binary, filters)]
        if file_of(binary) in exclusive:
            if tests:
                groups.append(tests)
        else:
            shared.extend(tests)
    # Exclusive binaries that await a build run last, after the shared queue: on a cold machine
    # their builds finish meanwhile, where waiting first would hold every slot idle.
    later = [g for g in groups if file_of(g[0][0]) in awaits]
    groups = [g for g in groups if file_of(g[0][0]) not in awaits]
    shared.sort(key=lambda job: -hints.get(job[1], unknown))
    total = sum(len(g) for g in groups + later) + len(shared)
    print(f"run-e2e: {total} tests, {args.jobs} at a time; {len(groups)} exclusive binaries first, "
          f"{len(later)} last (they await a build)", flush=True)

    pool = Pool(args.jobs)
    started = time.monotonic()
    for group in groups:
        pool.run(group)
    if any(file_of(b) in awaits for b, _ in shared):
        # A shared test that awaits a build: hold the shared queue until it is ready.
        ready = [r for b, _ in shared for r in awaits.get(file_of(b), [])]
        error = wait_ready(sorted(set(ready)))
        if error:
            held = [job for job in shared if file_of(job[0]) in awaits]
            pool.fail(held, error)
            shared = [job for job in shared if job not in held]
    pool.run(shared)
    for group in later:
        error = wait_ready(awaits[file_of(group[0][0])])
        if error:
            pool.fail(group, error)
        else:
            pool.run(group)
    wall = time.monotonic() - started

    failed = [r for r in pool.results if not r[2]]
    busy = sum(r[3] for r in pool.results)
    print(f"\nrun-e2e: {len(pool.results)} tests in {wall:.0f}s wall ({busy:.0f}s of test time over {args.jobs} slots); slowest:")
    for label, _, ok, secs in sorted(pool.results, key=lambda r: -r[3])[:8]:
        print(f"  {secs:7.1f}s  {label}{'' if ok else '  FAILED'}")
    for label, *_ in failed:
        print(f"run-e2e: FAILED {label}")
    if args.record:
        with open(args.record, "w") as f:
            json.dump({name: round(secs, 1) for _, name, _, secs in sorted(pool.results, key=lambda r: r[1])}, f, indent=1, sort_keys=True)
            f.write("\n")
    return 1 if failed or len(pool.results) != total else 0


if __name__ == "__main__":
    sys.exit(main())
