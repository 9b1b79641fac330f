#!/usr/bin/python3
"""scripts/lib/ctest_report.py counts what scripts/test reports: every figure in a CI
summary rests on it. Each case here is a ctest JUnit file with a known outcome."""
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "lib", "ctest_report.py")


def report(cases):
    """Runs ctest_report.py on a JUnit file of (name, status, output[, extra]) test
    cases; extra is XML inside the testcase (ctest's <skipped message=.../>)."""
    from xml.sax.saxutils import escape
    xml = "<testsuite>" + "".join(
        f'<testcase name="{c[0]}" status="{c[1]}">{c[3] if len(c) > 3 else ""}'
        f'<system-out>{escape(c[2])}</system-out></testcase>'
        for c in cases) + "</testsuite>"
    with tempfile.NamedTemporaryFile("w", suffix=".xml") as f:
        f.write(xml)
        f.flush()
        out = subprocess.run([sys.executable, REPORT, f.name], check=True,
                             capture_output=True, text=True).stdout
    return out.splitlines()


class CtestReport(unittest.TestCase):
    def test_cmocka_cases_are_counted_one_by_one(self):
        lines = report([("unit/test_a", "run",
                         "[==========] Running 3 test(s).\n"
                         "[ RUN      ] one\n[       OK ] one\n"
                         "[ RUN      ] two\nskipped: no loop devices\n[  SKIPPED ] two\n"
                         "[ RUN      ] three\n[       OK ] three\n")])
        self.assertEqual(lines[0], "counts 2 0 1")
        self.assertEqual(lines[1], "skip unit/test_a: two: no loop devices")

    def test_a_failed_case_says_why(self):
        lines = report([("integration/test_b", "fail",
                         "[==========] Running 2 test(s).\n"
                         "[ RUN      ] ok_case\n[       OK ] ok_case\n"
                         "[ RUN      ] bad_case\nengine[2]: noise\n"
                         "writes 128 done (0 failed), reads 128 done (2 failed)\n"
                         "[  ERROR   ] --- 0x2 != 0\n"
                         "[   LINE   ] --- test_b.c:621: error: Failure!\n"
                         "[  FAILED  ] bad_case\n")])
        self.assertEqual(lines[0], "counts 1 1 0")
        self.assertEqual(lines[1], "fail integration/test_b: bad_case")
        self.assertIn("why writes 128 done (0 failed), reads 128 done (2 failed)", lines)
        self.assertIn("why [  ERROR   ] --- 0x2 != 0", lines)
        self.assertIn("why [   LINE   ] --- test_b.c:621: error: Failure!", lines)

    def test_a_crash_inside_a_case_is_a_failure_with_its_last_words(self):
        lines = report([("integration/test_c", "fail",
                         "[==========] Running 2 test(s).\n"
                         "[ RUN      ] first\n[       OK ] first\n"
                         "[ RUN      ] second\nAddressSanitizer: heap-use-after-free\n")])
        self.assertEqual(lines[0], "counts 1 1 0")
        self.assertEqual(lines[1],
                         "fail integration/test_c: second (never finished: crash or time-out)")
        self.assertEqual(lines[2], "why AddressSanitizer: heap-use-after-free")

    def test_a_crash_after_every_case_passed_is_still_a_failure(self):
        lines = report([("unit/test_d", "fail",
                         "[==========] Running 1 test(s).\n[ RUN      ] only\n[       OK ] only\n"
                         "LeakSanitizer: detected memory leaks\n")])
        self.assertEqual(lines[0], "counts 1 1 0")

    def test_a_script_exiting_77_is_a_skip_with_its_reason(self):
        lines = report([("swap/test_f", "notrun", "checking\nSKIP: no /dev/loop-control\n",
                         '<skipped message="SKIP_RETURN_CODE=77"/>')])
        self.assertEqual(lines, ["counts 0 0 1", "skip swap/test_f: no /dev/loop-control"])

    def test_a_script_skip_needs_its_reason(self):
        lines = report([("swap/test_e", "notrun", "SKIP: no /dev/loop-control\n")])
        # ctest marks it not run; without SKIP_RETURN_CODE's message it is not a skip.
        self.assertEqual(lines[0], "counts 0 1 0")


if __name__ == "__main__":
    unittest.main(verbosity=2)
