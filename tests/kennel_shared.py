"""SharedKennelds: how the integration and hostile suites share kennelds between the tests of
one module (starting one costs its zygote's warm-up, a second of CPU). Each suite has its own
Kenneld class and checks; it hands them in as three functions:

- start(key) -> (root, kenneld): a started kenneld for that configuration, in root;
- stop_checked(kenneld): SIGTERM, then assert that it exited cleanly and left nothing running;
- reap(root, kenneld): whatever happened, kill what is left of it and remove root.
"""


class SharedKennelds:
    """One kenneld per configuration key, for the tests of one module."""

    def __init__(self, start, stop_checked, reap):
        self._start, self._stop_checked, self._reap = start, stop_checked, reap
        self.running = {}  # key -> (root, kenneld)

    def get(self, key):
        if key not in self.running:
            self.running[key] = self._start(key)
        return self.running[key][1]

    def retire(self, k):
        """A kenneld that failed a test's release check: stopped and reaped; the next test
        with its configuration gets a fresh one."""
        for key, (root, kk) in list(self.running.items()):
            if kk is k:
                del self.running[key]
                try:
                    self._stop_checked(k)
                except Exception:
                    pass  # the test failed already; reap kills what is left
                finally:
                    self._reap(root, k)

    def stop_all(self):
        """At the module's end: each stopped and checked (the first failure is raised), and
        all reaped."""
        try:
            for _, k in self.running.values():
                self._stop_checked(k)
        finally:
            for root, k in self.running.values():
                self._reap(root, k)
            self.running.clear()
