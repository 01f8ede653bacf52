"""The Jupyter project's own kernel test suite (jupyter_kernel_test, Debian's
python3-jupyter-kernel-test) on the jailcell kernel.

    python3 kernelsuite.py KERNEL_NAME KERNELS_DIR

Run by jupyter_test.go (TestJupyterKernelTestSuite) as a user who is not
root. The kernel is looked up in KERNELS_DIR only (the test's own
JUPYTER_PATH), never in the host's /usr/share/jupyter or ~/.local. The
class attributes are those of the suite's test for ipykernel
(test_ipykernel.py), with every operation turned on, so that each test
exercises its feature instead of skipping. Prints the unittest report,
then one line "JKT-RESULT {json}" with every test's outcome.
"""

import json
import os
import sys
import time
import unittest

import jupyter_kernel_test as jkt
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

KERNEL_NAME, KERNELS_DIR = sys.argv[1], sys.argv[2]
STARTUP_TIMEOUT = 300  # generous: the first kernel's session on a shared 2-core machine


class JailcellKernelTests(jkt.KernelTests):
    kernel_name = KERNEL_NAME

    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"

    completion_samples = [
        {"text": "zi", "matches": {"zip"}},
    ]

    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples = ["import = 7q"]

    code_page_something = "zip?"

    code_generate_error = "raise"

    code_execute_result = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
    ]

    code_display_data = [
        {"code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))", "mime": "text/html"},
        {"code": "from IPython.display import Math, display; display(Math('\\frac{1}{2}'))", "mime": "text/latex"},
    ]

    # ipykernel's test leaves out "range": IPython labels the current
    # session 0 in a range, not with the number a tail gives. jailcell
    # labels it as asked, so the range subtest runs too.
    code_history_pattern = "1?2*"
    supported_history_operations = ("tail", "range", "search")

    code_inspect_sample = "zip"

    code_clear_output = "from IPython.display import clear_output; clear_output()"

    @classmethod
    def setUpClass(cls):
        # start_new_kernel, with the kernelspec looked up in KERNELS_DIR
        # alone and a longer start-up wait.
        ksm = KernelSpecManager(kernel_dirs=[KERNELS_DIR])
        spec = ksm.get_kernel_spec(cls.kernel_name)
        if not spec.resource_dir.startswith(KERNELS_DIR + os.sep):
            raise RuntimeError("kernelspec %s found at %s, outside %s" % (cls.kernel_name, spec.resource_dir, KERNELS_DIR))
        cls.km = KernelManager(kernel_name=cls.kernel_name, kernel_spec_manager=ksm)
        cls.km.start_kernel()
        cls.kc = cls.km.client()
        cls.kc.start_channels()
        try:
            cls.kc.wait_for_ready(timeout=STARTUP_TIMEOUT)
        except RuntimeError:
            cls.kc.stop_channels()
            cls.km.shutdown_kernel()
            raise


class Result(unittest.TextTestResult):
    """Records every test and subtest outcome by name."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}  # test id -> "pass" | "fail" | "error" | "skip"
        self.notes = {}

    def _set(self, test, outcome, note=""):
        if isinstance(test, unittest.case._SubTest):
            note = "%s: %s" % (test._subDescription(), note)
            test = test.test_case
        name = test.id().rsplit(".", 1)[-1]
        prev = self.outcomes.get(name)
        # A failed subtest fails its test, whatever the test itself says.
        if prev in ("fail", "error") or (prev == "skip" and outcome == "pass"):
            return
        self.outcomes[name] = outcome
        if note:
            self.notes[name] = note

    def addSuccess(self, test):
        super().addSuccess(test)
        self._set(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, "fail", self._exc_info_to_string(err, test)[-2000:])

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, "error", self._exc_info_to_string(err, test)[-2000:])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, "skip", reason)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is None:
            return
        kind = "fail" if issubclass(err[0], test.failureException) else "error"
        self._set(subtest, kind, self._exc_info_to_string(err, test)[-2000:])


def main():
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(JailcellKernelTests)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=Result)
    t0 = time.monotonic()
    result = runner.run(suite)
    report = {
        "version": jkt.__version__,
        "tests_run": result.testsRun,
        "seconds": round(time.monotonic() - t0, 1),
        "outcomes": result.outcomes,
        "notes": result.notes,
        # A failure of setUpClass is an error of no test method.
        "class_errors": ["%s: %s" % (t, tb[-2000:]) for t, tb in result.errors if not isinstance(t, unittest.TestCase)],
    }
    print("JKT-RESULT " + json.dumps(report), flush=True)
    return 0 if result.wasSuccessful() and not result.skipped else 1


if __name__ == "__main__":
    sys.exit(main())
