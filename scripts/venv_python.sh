#!/bin/sh
# For the Makefile: is PYTHON one murmur-door runs on, and was VENV made by it?
# Prints a problem (make stops with it) or nothing. A VENV made by another Python (or
# one whose python no longer runs: a half-made venv from a failed start) is removed,
# so the next step makes it afresh with PYTHON instead of reusing it and failing.
python=$1
venv=$2
about='import sys; print(sys.version_info >= (3, 11), sys.platform, "%d.%d.%d" % sys.version_info[:3], sys.base_prefix)'
want=$("$python" -c "$about" 2>/dev/null) || {
    echo "PYTHON=$python does not run: install Python 3.11 or later, or set PYTHON=/path/to/python3.11"
    exit 0
}
set -- $want
if [ "$1" != True ]; then
    echo "PYTHON=$python is Python $3: murmur-door needs Python 3.11 or later (set PYTHON=python3.11)"
    exit 0
fi
if [ "$2" != linux ]; then
    echo "murmur-door runs on Linux (Landlock, seccomp, cgroups); this is $2"
    exit 0
fi
if [ -e "$venv" ]; then
    have=$("$venv/bin/python" -c "$about" 2>/dev/null)
    if [ "$have" != "$want" ]; then
        rm -rf "$venv"
    fi
fi
