"""Shared by every Python suite: being here puts tests/ on sys.path (pytest inserts a
conftest's directory), so that the integration and hostile suites import kennel_shared."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "quiet: compares wall times (a bystander's round trip against a stall, a deadline's "
        "margin): `make check` runs these alone, after the parallel phase, so that the other "
        "tests' load is not what they measure")
