"""Shared by every Python suite: being here puts tests/ on sys.path (pytest inserts a
conftest's directory), so that the integration and hostile suites import kennel_shared."""
