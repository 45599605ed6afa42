"""Fixtures for the kernel tests: a real kernel process over its pipe (kernel_pipe_client)."""
import pytest

from kernel_pipe_client import KernelProcess


@pytest.fixture
def kernel(tmp_path):
    k = KernelProcess(tmp_path)
    try:
        yield k
    finally:
        k.kill()
