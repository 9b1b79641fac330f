#!/usr/bin/python3
"""Counts a ctest run test case by test case, from ctest's JUnit file.

scripts/test calls this after each ctest stage. ctest alone counts a cmocka binary as
one test and a cmocka skip() inside it as a pass, and --output-on-failure never shows why
something skipped; this reads every test's own output instead:

  - a cmocka binary counts each of its cases: '[       OK ] name' passed,
    '[  FAILED  ] name' failed ('[  ERROR   ] name' too: its setup or teardown
    failed), '[  SKIPPED ] name' skipped, the reason being the last
    line the case printed that starts with 'skipped:' (print it before skip());
  - any other test (test/swap/*.sh) counts once: ctest's own status, a skip (exit 77)
    with the reason from its last 'SKIP:' line;
  - a binary that failed without a failed case (a crash, a sanitizer abort, a time-out,
    a case that never finished) is one failure more, so a crash is never hidden by the
    cases that passed before it.

Prints 'counts PASSED FAILED SKIPPED', then one 'skip TEST[: CASE]: REASON' or
'fail TEST[: CASE]' line per such test, for scripts/test to report; with --times, also
one 'time TEST SECONDS' line per test (ctest's wall time for it), for the summary's
stage and guest times. A failed cmocka case
is followed by 'why LINE' lines: cmocka's error and the lines the case printed just
before it, so that the summary at the end of a CI log (often all of it that is kept)
says what failed, not only where.
"""
import re
import sys
import xml.etree.ElementTree as ET

# Searched for, not matched at the line's start: the test's stderr (log lines, a stats
# report) can land in the middle of a stdout line in the captured output.
RESULT = re.compile(r"\[ *(OK|FAILED|ERROR|SKIPPED) *\] (\S+)\s*$")
RUN = re.compile(r"\[ RUN +\] (\S+)\s*$")
# cmocka's own account of a failed check: '[  ERROR   ] --- 0 != 0x1' and
# '[   LINE   ] --- file.c:123: error: Failure!'.
CHECK = re.compile(r"\[ *(ERROR|LINE) *\] --- ")
WHY_CONTEXT = 4      # lines printed just before the failed check
WHY_WIDTH = 240      # a log line can be long; the start of it says enough


def cmocka_cases(out):
    """Yields (case, verdict, reason) for each case that printed a result line. The
    reason is the skip's, or for a failure a list of lines saying why."""
    current, reason, recent, why = None, None, [], []
    for line in out.splitlines():
        m = RUN.search(line)
        if m:
            if current:
                yield current, "UNFINISHED", recent[-WHY_CONTEXT:]
            current, reason, recent, why = m.group(1), None, [], []
            continue
        m = RESULT.search(line)
        if m and current and m.group(2) == current:
            yield current, m.group(1), (why or recent[-WHY_CONTEXT:]) \
                if m.group(1) in ("FAILED", "ERROR") else reason
            current = None
            continue
        if not current:
            continue
        if CHECK.search(line):
            if not why:
                why = recent[-WHY_CONTEXT:]
            why.append(line.strip())
        elif line.strip():
            recent.append(line.strip())
            del recent[:-WHY_CONTEXT]
        if line.lstrip().lower().startswith("skipped:"):
            reason = line.strip()[len("skipped:"):].strip()
    if current:
        # RUN with no result: the binary died inside this case.
        yield current, "UNFINISHED", recent[-WHY_CONTEXT:]


def why_lines(reason):
    return [f"why {line[:WHY_WIDTH]}" for line in reason or []]


def skip_reason(out, ctest_message):
    for line in reversed(out.splitlines()):
        if "SKIP:" in line:
            return line.split("SKIP:", 1)[1].strip()
    return "no reason printed (" + (ctest_message or "skipped") + ")"


def main():
    args = sys.argv[1:]
    times = "--times" in args
    args = [a for a in args if a != "--times"]
    if len(args) != 1:
        sys.exit("usage: ctest_report.py [--times] JUNIT.xml")
    passed = failed = skipped = 0
    lines = []
    for case in ET.parse(args[0]).getroot().iter("testcase"):
        name = case.get("name")
        if times:
            lines.append(f"time {name} {float(case.get('time') or 0):.0f}")
        status = case.get("status")
        out = case.findtext("system-out") or ""
        test_failed = status == "fail" or case.find("failure") is not None
        if "[==========] Running" in out:
            case_failed = False
            for cname, verdict, reason in cmocka_cases(out):
                if verdict == "OK":
                    passed += 1
                elif verdict == "SKIPPED":
                    skipped += 1
                    lines.append(f"skip {name}: {cname}: {reason or 'no reason printed'}")
                elif verdict in ("FAILED", "ERROR"):
                    failed += 1
                    case_failed = True
                    lines.append(f"fail {name}: {cname}" +
                                 (" (its setup or teardown failed)" if verdict == "ERROR" else ""))
                    lines.extend(why_lines(reason))
                else:
                    failed += 1
                    case_failed = True
                    lines.append(f"fail {name}: {cname} (never finished: crash or time-out)")
                    lines.extend(why_lines(reason))
            if test_failed and not case_failed:
                failed += 1
                lines.append(f"fail {name} (exited abnormally after its cases: crash, "
                             "sanitizer report or time-out)")
        elif status == "notrun" or case.find("skipped") is not None:
            msg = case.find("skipped")
            why = msg.get("message", "") if msg is not None else ""
            if not why.startswith("SKIP_"):
                # ctest's 'not run' is also a test whose binary was never built.
                failed += 1
                lines.append(f"fail {name} (not run: {why or out.strip() or 'unknown'})")
                continue
            skipped += 1
            lines.append(f"skip {name}: " + skip_reason(out, why))
        elif test_failed:
            failed += 1
            lines.append(f"fail {name}")
        else:
            passed += 1
    print(f"counts {passed} {failed} {skipped}")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
