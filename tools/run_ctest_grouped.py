#!/usr/bin/env python3
"""Runs a build's ctest cases with one process per test program instead of one per case.

gtest_discover_tests registers every GoogleTest case as its own ctest test, and ctest starts a
process for each. Under the sanitizers a process start costs about half a second (the instrumented
library's startup and the leak check at exit), over 1500 cases: more than ten minutes of CI's two
cores spent starting processes. This runs the same cases, with the same environment and working
directory ctest would give them, as one `--gtest_filter=A:B:...` call per program and environment,
in parallel, and fails when any of them fails, printing that program's whole output. Tests that are
not GoogleTest cases run as their own command, as under ctest.

  run_ctest_grouped.py --test-dir build-asan [-R REGEX] [-j N] [--timeout SECONDS]
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time


def load_tests(test_dir, regex):
    listing = subprocess.run(["ctest", "--test-dir", test_dir, "--show-only=json-v1"], check=True,
                             capture_output=True, text=True).stdout
    selected = []
    for test in json.loads(listing)["tests"]:
        if regex and not re.search(regex, test["name"]):
            continue
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        selected.append((test["name"], test["command"], props))
    return selected


def group(tests):
    """(command, env, cwd, case count) per process: gtest cases of one program and environment together."""
    gtest = collections.OrderedDict()
    runs = []
    for name, command, props in tests:
        env = tuple(props.get("ENVIRONMENT", []))
        cwd = props.get("WORKING_DIRECTORY")
        filters = [a for a in command[1:] if a.startswith("--gtest_filter=")]
        if len(filters) == 1:
            case = filters[0][len("--gtest_filter="):]
            rest = tuple(a for a in command[1:] if not a.startswith("--gtest_filter="))
            gtest.setdefault((command[0], rest, env, cwd), []).append(case)
        else:
            runs.append((command, env, cwd, 1))
    for (program, rest, env, cwd), cases in gtest.items():
        runs.append(([program, "--gtest_filter=" + ":".join(cases), *rest], env, cwd, len(cases)))
    return runs


def run_one(command, env, cwd, timeout):
    full_env = dict(os.environ)
    for item in env:
        key, _, value = item.partition("=")
        full_env[key] = value
    start = time.monotonic()
    try:
        done = subprocess.run(command, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              errors="replace")
        return done.returncode, done.stdout + done.stderr, time.monotonic() - start
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return -1, out + f"\n*** timed out after {timeout} s\n", time.monotonic() - start


def count(pattern, text):
    m = re.search(pattern, text)
    return int(m.group(1)) if m else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test-dir", required=True)
    parser.add_argument("-R", dest="regex", default=None, help="only tests whose name matches (as ctest -R)")
    parser.add_argument("-j", dest="jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per process")
    args = parser.parse_args()

    tests = load_tests(args.test_dir, args.regex)
    if not tests:
        print(f"run_ctest_grouped: no test in {args.test_dir} matches {args.regex!r}")
        return 1
    runs = group(tests)
    # The longest programs first, so that the last minutes are not one program running alone.
    runs.sort(key=lambda r: -r[3])
    failed, passed, skipped = [], 0, 0
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, cmd, env, cwd, args.timeout): (cmd, cases) for cmd, env, cwd, cases in runs}
        for future in concurrent.futures.as_completed(futures):
            cmd, cases = futures[future]
            rc, output, seconds = future.result()
            program = os.path.basename(cmd[0]) if len(cmd) == 1 or cmd[1].startswith("--gtest") else " ".join(cmd)
            if rc != 0:
                failed.append(program)
                print(f"FAILED  {program} ({cases} cases, {seconds:.1f} s, exit {rc})\n{output}", flush=True)
                continue
            skipped_here = count(r"\[  SKIPPED \] (\d+) test", output)
            passed += cases - skipped_here
            skipped += skipped_here
            print(f"ok      {program} ({cases} cases, {skipped_here} skipped, {seconds:.1f} s)", flush=True)
    total = sum(r[3] for r in runs)
    print(f"\nrun_ctest_grouped: {total} tests in {len(runs)} processes, {time.monotonic() - start:.0f} s: "
          f"{passed} passed, {skipped} skipped, {len(failed)} processes failed")
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
