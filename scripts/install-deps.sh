#!/bin/sh
# install-deps.sh: the one place kennel's dependencies are installed (Debian bookworm: apt,
# and npm for the tests' playwright-core and MCP SDK).
# The kernels' runtime (docs/runtime.md) is Debian's: the scientific stack and the packages
# agents import, each imported lazily in a session unless the zygote's --preload names it.
# valgrind runs `make check`'s memcheck (and kennel-gateway under it in one test); valgrind's
# callgrind and strace count kenneld's work per cell in `make bench`.
# Installs only what is missing, so `make run` and `make check` stay fast after the first time.
# Set KENNEL_NO_INSTALL=1 to skip (e.g. on a machine you manage yourself).
set -eu
[ "${KENNEL_NO_INSTALL:-0}" = 1 ] && exit 0
cd "$(dirname "$0")/.."

PKGS="build-essential pkg-config
libzmq3-dev libczmq-dev libjansson-dev libseccomp-dev libsodium-dev libssl-dev uuid-dev libwebsockets-dev
python3 python3-dev python3-jupyter-client jupyter-console python3-nbclient python3-nbformat
python3-ipykernel python3-ipython python3-pytest python3-pytest-xdist python3-zmq
python3-numpy python3-pandas python3-matplotlib python3-pil python3-dill
python3-comm python3-ipywidgets python3-widgetsnbextension jupyter-nbextension-jupyter-js-widgets
python3-tqdm python3-websocket openssl
jupyter-notebook chromium
python3-scipy python3-sklearn python3-seaborn python3-statsmodels python3-sympy python3-networkx
python3-openpyxl python3-xlrd python3-docx python3-pypdf python3-reportlab python3-bs4
python3-lxml python3-tabulate python3-imageio python3-skimage python3-h5py python3-xarray
python3-plotly python3-nltk python3-joblib python3-jinja2 python3-requests python3-dateutil
python3-tz python3-yaml
redis-server libhiredis-dev iproute2 openssh-server openssh-client
valgrind strace"

missing=""
for p in $PKGS; do
    s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$s" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
# node and npm are looked for as commands: a nodejs package that bundles npm (NodeSource's)
# conflicts with Debian's npm package.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"

if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing packages:$missing" >&2
        echo "install-deps: run as root, or: sudo apt-get install$missing" >&2
        exit 1
    fi
    echo "install-deps: installing:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing >&2
fi

# The tests' npm packages, as each folder's package-lock.json pins them: playwright-core in
# tests/browser (it drives /usr/bin/chromium; it never downloads a browser), and the official
# MCP TypeScript SDK in tests/mcp (the client of `kennel mcp`: @modelcontextprotocol/sdk
# 1.32.2 wants node >= 18; its @hono/node-server is pinned to 1.19.19, node >= 18.14.1, as
# 2.x wants node 20: so one lock serves Debian's node 18.19 and node 20). The copy of the lock
# file in node_modules says what is there, so npm runs only when a lock is new or changed.
for b in tests/browser tests/mcp; do
    if ! cmp -s "$b/package-lock.json" "$b/node_modules/.kennel-installed-lock"; then
        echo "install-deps: npm ci in $b" >&2
        (cd "$b" && npm ci --no-audit --no-fund >&2)
        cp "$b/package-lock.json" "$b/node_modules/.kennel-installed-lock"
    fi
done
