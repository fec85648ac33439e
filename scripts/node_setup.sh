#!/bin/sh
# The GPU node's recipe, in one place: what the labs need to run, nothing
# the book's calculators or the grader need (npm, Chromium, bubblewrap:
# `make setup` adds those).
#   sh scripts/node_setup.sh          # on a fresh Debian/Ubuntu image
#   make node-setup                   # the same, once make is there
# Steps, each announced as "node-setup: step N/5: ..." so a failure names
# its step:
# 1. system packages (apt, as root or through sudo): Python's headers and
#    venv (Triton, DeepSpeed's JIT ops and Colossal-AI's kernels compile
#    against Python.h), a C/C++ compiler (build-essential), ninja (torch's
#    cpp_extension), git, make, libaio (DeepSpeed's async_io for lab 4's
#    NVMe cell);
# 2. the interpreter: PYTHON if given, else the first of python3,
#    python3.13, python3.12, python3.11 that scripts/check_python.sh
#    accepts; none: python3.11 from apt (Ubuntu 22.04's python3 is 3.10);
# 3. .venv: the torch build the node's driver runs (scripts/torch_build.py)
#    and requirements.txt (`make venv`);
# 4. .venv-colossalai, lab 9's own environment (`make colossalai`);
# 5. a check: each tool the labs call, found (the venv's bin first on PATH,
#    as labkit.launch gives the ranks).
# Without root and sudo, step 1 prints the one apt-get line to run and
# stops. nvcc is not installed here: only lab 9's Gemini compiles with it,
# and preflight marks that lab skipped, with the fix, where it is missing.
set -eu
cd "$(dirname "$0")/.."
say() { echo "node-setup: $*"; }
die() { echo "node-setup: FAILED at $*" >&2; exit 1; }

PKGS="python3 python3-venv python3-dev build-essential ninja-build git \
make ca-certificates libaio-dev"
as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else return 2; fi
}
apt_install() {
    command -v apt-get >/dev/null || die "step 1: no apt-get: install" \
        "the equivalents of: $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "$@" || {
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "$@"; } || die "step 1: run as root:" \
        "apt-get install $*"
}

say "step 1/5: system packages ($PKGS)"
# shellcheck disable=SC2086
apt_install $PKGS

say "step 2/5: the interpreter"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    for p in python3 python3.13 python3.12 python3.11; do
        if command -v "$p" >/dev/null && sh scripts/check_python.sh "$p" \
            2>/dev/null; then PY="$p"; break; fi
    done
fi
if [ -z "$PY" ]; then
    apt_install python3.11 python3.11-venv python3.11-dev
    PY=python3.11
fi
sh scripts/check_python.sh "$PY" || die "step 2: $PY"
V=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
HDR=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$HDR/Python.h" ] || apt_install "python$V-dev" "python$V-venv"
[ -f "$HDR/Python.h" ] || die "step 2: no $HDR/Python.h (python$V-dev)"
say "  $PY: Python $V, headers in $HDR"

say "step 3/5: .venv (the node's torch build, requirements.txt)"
# Debian 12's python3 is 3.11.2; soupsieve 4.1.3 (nbconvert's bs4's CSS
# selectors) asks for >= 3.11.5: the one pin whose Requires-Python
# excludes it (every pin's, read from the installed metadata). There pip
# takes the newest soupsieve that supports the interpreter instead.
# .venv-colossalai installs its pins from a wheel folder with --no-deps:
# there soupsieve is left out and installed from the index after.
REQ=requirements.txt CAI_REQ=requirements-colossalai.txt
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11, 5))'; then
    mkdir -p .cache
    REQ=.cache/requirements-node.txt CAI_REQ=.cache/requirements-cai-node.txt
    sed 's/^soupsieve==.*/soupsieve  # newest for this Python (node_setup)/' \
        requirements.txt > "$REQ"
    grep -v '^soupsieve==' requirements-colossalai.txt > "$CAI_REQ"
    say "  Python $("$PY" -c 'import platform;
print(platform.python_version())') < 3.11.5: soupsieve unpinned ($REQ)"
fi
make --no-print-directory venv PYTHON="$PY" REQUIREMENTS="$REQ" ||
    die "step 3: make venv"

say "step 4/5: .venv-colossalai (lab 9)"
make --no-print-directory colossalai PYTHON="$PY" \
    CAI_REQUIREMENTS="$CAI_REQ" || die "step 4: make colossalai"
if [ "$CAI_REQ" != requirements-colossalai.txt ]; then
    .venv-colossalai/bin/python -m pip install -q soupsieve ||
        die "step 4: soupsieve for .venv-colossalai"
fi

say "step 5/5: the tools the labs call"
PATH="$PWD/.venv/bin:$PATH"
missing=""
for tool in cc c++ ninja git; do
    command -v "$tool" >/dev/null || missing="$missing $tool"
done
.venv/bin/python -c 'import torch, deepspeed, triton' 2>/dev/null ||
    .venv/bin/python -c 'import torch, deepspeed' ||
    missing="$missing torch/deepspeed"
[ -x .venv-colossalai/bin/python ] || missing="$missing .venv-colossalai"
[ -z "$missing" ] || die "step 5: missing:$missing"
say "done: .venv ($(.venv/bin/python -c 'import torch; print("torch",
    torch.__version__)')), .venv-colossalai, cc, ninja, git found;" \
    "next: .venv/bin/python -m labkit preflight --profile gpu8"
