"""kennel_runtime: what a kernel's Python has installed, and a digest of it.

The runtime is the sorted `name=version` list of every distribution on the kernel's
sys.path (Debian's dist-packages, and an operator's `kenneld --site DIR`, mounted at SITE)
plus the Python build (sys.version). Its digest, the sha256 of that text, goes into
kernel_info_reply and every execute_reply's metadata, so that a run can be tied to the
exact environment it ran in. A zygote computes it once, before it forks (kernels inherit
it); a cold kernel at its start. `kennel runtime` runs this file with the host's Python:

    python3 -I kennel_runtime.py [--site DIR] [--json]

It also answers the question a ModuleNotFoundError raises: what does the runtime have
instead? (hint()).
"""

import difflib
import hashlib
import os
import sys

SITE = "/opt/site"  # where the sandbox mounts `kenneld --site DIR` (SANDBOX_SITE_DIR)

# Import names that are not their distribution's name, or that people reach for when the
# runtime has something else: import name -> what to say.
_ALIASES = {
    "scikit_learn": "scikit-learn is imported as sklearn",
    "scikitlearn": "scikit-learn is imported as sklearn",
    "scikit_image": "scikit-image is imported as skimage",
    "beautifulsoup4": "beautifulsoup4 is imported as bs4",
    "beautifulsoup": "beautifulsoup4 is imported as bs4",
    "BeautifulSoup": "use: from bs4 import BeautifulSoup",
    "pillow": "pillow is imported as PIL",
    "Image": "use: from PIL import Image",
    "pyyaml": "pyyaml is imported as yaml",
    "python_docx": "python-docx is imported as docx",
    "python_dateutil": "python-dateutil is imported as dateutil",
    "dateutils": "python-dateutil is imported as dateutil",
    "PyPDF2": "PyPDF2 is not installed; its successor pypdf is (import pypdf)",
    "pyPdf": "pyPdf is not installed; its successor pypdf is (import pypdf)",
    "fitz": "PyMuPDF (fitz) is not installed; for PDFs the runtime has pypdf and reportlab",
    "pymupdf": "PyMuPDF is not installed; for PDFs the runtime has pypdf and reportlab",
    "cv2": "OpenCV (cv2) is not installed; for images the runtime has skimage "
           "(scikit-image), PIL (pillow) and imageio",
    "opencv": "OpenCV (cv2) is not installed; for images the runtime has skimage "
              "(scikit-image), PIL (pillow) and imageio",
    "torch": "PyTorch is not installed; for machine learning the runtime has sklearn",
    "tensorflow": "TensorFlow is not installed; for machine learning the runtime has sklearn",
    "keras": "Keras is not installed; for machine learning the runtime has sklearn",
    "xgboost": "xgboost is not installed; sklearn.ensemble has "
               "HistGradientBoostingClassifier and HistGradientBoostingRegressor",
    "lightgbm": "lightgbm is not installed; sklearn.ensemble has "
                "HistGradientBoostingClassifier and HistGradientBoostingRegressor",
    "polars": "polars is not installed; the runtime has pandas",
    "xlsxwriter": "xlsxwriter is not installed; the runtime has openpyxl (pandas' "
                  "to_excel uses it)",
    "plotly_express": "use: import plotly.express",
}

_digest = None  # (digest, lines), computed once per process


def _distributions(extra=()):
    """{name: version} of every distribution on sys.path and in extra directories: from the
    names of their .dist-info and .egg-info entries (`Name-Version.dist-info`), which is ~1 ms
    for Debian's ~150, where importlib.metadata took ~500 ms parsing every METADATA file. An
    entry whose name carries no version has it read from its metadata's `Version:` line."""
    found = {}
    for path in list(sys.path) + list(extra):
        if not path or not os.path.isdir(path):
            continue
        try:
            entries = sorted(os.listdir(path))
        except OSError:
            continue
        for entry in entries:
            for suffix in (".dist-info", ".egg-info"):
                if entry.endswith(suffix):
                    break
            else:
                continue
            stem = entry[:-len(suffix)]
            name, _, version = stem.partition("-")
            version = version.split("-py", 1)[0]  # Name-1.0-py3.11.egg-info
            if not version:
                version = _version_in(os.path.join(path, entry))
            if name and version:
                found.setdefault(_canonical(name), version)
    return found


def _version_in(entry):
    """The `Version:` line of a .dist-info's METADATA or an .egg-info's PKG-INFO (or the
    .egg-info file itself), or ""."""
    for f in (os.path.join(entry, "METADATA"), os.path.join(entry, "PKG-INFO"), entry):
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break  # the headers end at the first empty line
        except OSError:
            continue
    return ""


def _canonical(name):
    """PEP 503's normalised name: `Jinja2` and `jinja2`, `python_dateutil` and
    `python-dateutil` are one."""
    out = []
    for ch in name.lower():
        out.append("-" if ch in "_." else ch)
    return "-".join(p for p in "".join(out).split("-") if p)


def describe(extra=()):
    """(digest, packages): the runtime's sha256 digest ("sha256:" + hex) and its sorted
    (name, version) pairs."""
    found = _distributions(extra)
    packages = sorted(found.items())
    text = "".join(f"{n}={v}\n" for n, v in packages) + "python=" + sys.version + "\n"
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest(), packages


def compute(extra=()):
    """Compute this process's digest now, with extra directories (a zygote: the host path of
    `kenneld --site`, which its kernels see at SITE)."""
    global _digest
    _digest = describe(extra)


def digest():
    """This process's runtime digest, computed on first use (in a zygote: before it forks)."""
    global _digest
    if _digest is None:
        _digest = describe([SITE] if os.path.isdir(SITE) else [])
    return _digest[0]


def add_site():
    """Put the operator's site-packages (kenneld --site) on sys.path, after Debian's: it adds
    packages, it does not replace the runtime's. Its .pth files are processed."""
    if os.path.isdir(SITE) and SITE not in sys.path:
        import site

        site.addsitedir(SITE)


def _top_level_names():
    """Top-level module names importable from sys.path."""
    import pkgutil

    names = set(sys.builtin_module_names)
    for info in pkgutil.iter_modules():
        names.add(info.name)
    return names


def hint(missing):
    """A phrase saying what the runtime has instead of the module `missing` (its top-level
    name is what counts), or None: an alias from the table, else the installed top-level
    names closest to it (difflib)."""
    if not isinstance(missing, str) or not missing:
        return None
    top = missing.split(".")[0]
    for key in (top, top.lower()):
        if key in _ALIASES:
            return _ALIASES[key]
    try:
        names = _top_level_names()
    except Exception:
        return None
    if "." in missing and top in names:
        return None  # a submodule of an installed package: nothing better to say
    lowered = {n.lower(): n for n in names if not n.startswith("_")}
    if top.lower() in lowered and lowered[top.lower()] != top:
        return f"did you mean {lowered[top.lower()]}?"
    close = difflib.get_close_matches(top.lower(), list(lowered), n=3, cutoff=0.75)
    if close:
        return "did you mean " + " or ".join(lowered[c] for c in close) + "?"
    return None


def main(argv):
    import json

    extra, as_json = [], False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--site" and args:
            extra.append(args.pop(0))
        elif a == "--json":
            as_json = True
        else:
            sys.exit("usage: kennel_runtime.py [--site DIR] [--json]")
    d, packages = describe(extra)
    if as_json:
        json.dump({"digest": d, "python": sys.version,
                   "packages": [{"name": n, "version": v} for n, v in packages]},
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    width = max((len(n) for n, _ in packages), default=0)
    for n, v in packages:
        print(f"{n:<{width}}  {v}")
    print(f"python  {sys.version.splitlines()[0]}")
    print(f"digest  {d}")


if __name__ == "__main__":
    main(sys.argv[1:])
