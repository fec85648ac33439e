#!/bin/sh
# Is $1 a Python the course supports (3.11 to 3.13, as pyproject.toml)?
#   sh scripts/check_python.sh python3.12 && echo yes
# Otherwise one line on stderr, with the fix, and exit status 2. The
# Makefile runs it before it creates .venv or installs anything.
# .venv-colossalai has its own interpreter, 3.11 or 3.12 (its pins have no
# 3.13 builds): scripts/cai_python.sh. The supported versions and why:
# docs/setup.md ("Python versions").
py="$1"
fix="install Python 3.11 to 3.13 (Ubuntu 22.04: sudo apt install python3.11 python3.11-venv), then make PYTHON=python3.11"
if [ -z "$py" ]; then
    echo "make: no supported Python found (tried python3, python3.13, python3.12, python3.11): $fix" >&2
    exit 2
fi
v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
    echo "make: cannot run the Python interpreter '$py': $fix" >&2; exit 2; }
case "$v" in
    3.11|3.12|3.13) exit 0 ;;
esac
echo "make: Python $v ($py) is not supported (3.11 to 3.13 are): $fix" >&2
exit 2
