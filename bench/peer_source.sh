# Sourced by bench/peer_llamacpp.sh and tools/build_peer_for_device.sh: the peer's version, and its llama.cpp
# source fetched once from the PyPI sdist (where the brief names it) into a folder outside git.
PEER_SDIST_SPEC="llama-cpp-python==0.3.36"

# peer_source DIR: llama.cpp's source in DIR, downloaded and unpacked unless DIR exists.
peer_source() {
    local dir=$1 tmp
    [ -d "$dir" ] && return
    echo "peer: downloading the $PEER_SDIST_SPEC sdist" >&2
    tmp=$(mktemp -d)
    python3 -m pip download --no-deps --no-binary :all: --disable-pip-version-check -d "$tmp" "$PEER_SDIST_SPEC" >&2 ||
        { echo "peer: error: pip download of $PEER_SDIST_SPEC failed" >&2; rm -rf "$tmp"; return 1; }
    tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
    mkdir -p "$(dirname "$dir")"
    mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$dir"
    rm -rf "$tmp"
}
