#!/bin/sh
# Which interpreter builds .venv-colossalai? Its pins (torch 2.5.1, triton
# 3.1.0 for Colossal-AI 0.5.0) have builds for Python 3.11 and 3.12 only.
#   sh scripts/cai_python.sh "$CAI_PYTHON" "$PYTHON"   # prints its path
# (sys.executable of the one chosen: a pyenv shim's real interpreter)
# 1. CAI_PYTHON ($1) when given: it must be 3.11 or 3.12 (else exit 2).
# 2. PYTHON ($2, the interpreter of .venv) when it is 3.11 or 3.12: the
#    wheel folder of the pins (about 5.8 GB, built once per machine) holds
#    wheels of one Python version; following PYTHON keeps the folder a
#    machine already has (3.11 on the course's build machine) in use.
# 3. The first of python3.12, python3.11 on PATH.
# None: one line on stderr naming what to install, and exit status 3 (the
# Makefile then leaves .venv-colossalai out and lab 9's tests are skipped
# with that line; under CI=true it stops instead).
version() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}
real() {    # the interpreter itself (not a pyenv shim that picks one later)
    "$1" -c 'import sys; print(sys.executable)' 2>/dev/null || command -v "$1"
}
pins_ok() {
    case "$(version "$1")" in 3.11|3.12) return 0 ;; esac
    return 1
}
if [ -n "$1" ]; then
    pins_ok "$1" && { real "$1"; exit 0; }
    echo "make: CAI_PYTHON=$1 (Python $(version "$1" || echo '?')) cannot" \
         "build .venv-colossalai: its pins need Python 3.11 or 3.12" >&2
    exit 2
fi
if [ -n "$2" ] && pins_ok "$2"; then
    real "$2"
    exit 0
fi
for p in python3.12 python3.11; do
    command -v "$p" >/dev/null && pins_ok "$p" && { real "$p"; exit 0; }
done
echo "no Python 3.12 or 3.11 for .venv-colossalai (lab 9's pins need one):" \
     "apt install python3.12-venv, or pyenv install 3.12," \
     "or make CAI_PYTHON=/path/to/python3.12" >&2
exit 3
