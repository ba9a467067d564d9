#!/usr/bin/env bash
# Installs kvlm's build and test dependencies from Debian packages (and Python reference tools used by
# tools/ scripts that regenerate test data; not needed to build or test).
set -euo pipefail
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
packages=(g++ make python3 python3-pip python3-numpy python3-jsonschema libcli11-dev libfmt-dev doctest-dev nlohmann-json3-dev libpcre2-dev libxxhash-dev libedit-dev tmux
          clang libclang-rt-14-dev)  # clang + compiler-rt: the sanitizer and libFuzzer builds; numpy: fuzz seeds;
                                     # jsonschema: tools/check_constrained.py, which the tests run
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# The fuzz seed scripts run `python3`, which may be another interpreter than Debian's (pyenv): give it numpy
# from PyPI when the Debian package is not the one it sees.
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install --quiet numpy
python3 -c 'import jsonschema' 2>/dev/null || python3 -m pip install --quiet jsonschema
# gguf-py: the k-quant model test writes its GGUF and checks block dequantization with it (a reference only).
python3 -c 'import gguf' 2>/dev/null || python3 -m pip install --quiet gguf==0.19.0
