"""A skipped broker test fails the run, whether the suite runs in one process or in xdist workers."""

from __future__ import annotations

import pytest

BROKER_MODULE = """
import pytest

pytestmark = pytest.mark.kafka


@pytest.fixture
def broker():
    pytest.skip("no broker in the fixture")


def test_skipped_in_the_body():
    pytest.skip("no broker in the body")


@pytest.mark.skip(reason="a skip marker")
def test_skipped_by_a_marker():
    pass


def test_skipped_in_a_fixture(broker):
    pass


@pytest.mark.xfail(reason="expected to fail", strict=True)
def test_expected_to_fail():
    raise AssertionError


def test_passes():
    pass
"""


WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])


def _run(pytester: pytest.Pytester, workers: list[str]) -> pytest.RunResult:
    pytester.makeini("[pytest]\nmarkers =\n    kafka: a broker test\n")
    return pytester.runpytest_subprocess("-p", "tests.broker_skips", "-p", "no:cacheprovider", *workers)


@WORKERS
def test_a_skipped_broker_test_fails_and_a_skipped_unit_test_stays_skipped(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    pytester.makepyfile(**{
        "tests/kafka/test_brokers": BROKER_MODULE,
        "tests/test_unit": "import pytest\n\n\ndef test_skipped():\n    pytest.skip('not a broker test')\n",
    })  # fmt: skip
    result = _run(pytester, workers)
    result.assert_outcomes(failed=1, errors=2, passed=1, skipped=1, xfailed=1)  # setup failures are errors
    for line in (
        "broker test marked kafka was skipped during call (Skipped: no broker in the body); *",
        "broker test marked kafka was skipped during setup (Skipped: a skip marker); *",
        "broker test marked kafka was skipped during setup (Skipped: no broker in the fixture); *",
    ):
        result.stdout.fnmatch_lines([line])


@WORKERS
def test_a_broker_test_module_skipped_at_import_fails(pytester: pytest.Pytester, workers: list[str]) -> None:
    pytester.makepyfile(**{"tests/kafka/test_import": "import pytest\n\npytest.importorskip('no_such_module_here')\n"})
    result = _run(pytester, workers)
    assert result.ret != 0
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*broker test module tests/kafka/test_import.py was skipped at collection*"])
