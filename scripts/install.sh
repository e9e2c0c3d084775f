#!/bin/sh
# Installs a built tree under a prefix (what `make install PREFIX=DIR` runs):
#   bin/dtrain
#   lib/libdtrain.so.VERSION, its soname link libdtrain.so.ABI, libdtrain.so
#   lib/libdtrain.a
#   include/dtrain.h
#   lib/pkgconfig/dtrain.pc
#   lib/python3/dist-packages/dtrain (the Python module, ctypes over the library)
# so that `cc prog.c $(pkg-config --cflags --libs dtrain)` builds a program
# (PKG_CONFIG_PATH=DIR/lib/pkgconfig) and `import dtrain` finds the library
# (PYTHONPATH=DIR/lib/python3/dist-packages).
#
# usage: scripts/install.sh --prefix DIR [--build DIR] [--version V] [--abi N]
set -eu

cd "$(dirname "$0")/.."
BUILD=build
PREFIX=
VERSION=0.1.0
ABI=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) PREFIX=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --version) VERSION=$2; shift 2 ;;
        --abi) ABI=$2; shift 2 ;;
        *) echo "install: unknown flag $1" >&2; exit 2 ;;
    esac
done
[ -n "$PREFIX" ] || { echo "install: missing --prefix DIR" >&2; exit 2; }
for f in "$BUILD/dtrain" "$BUILD/libdtrain.so.$VERSION" "$BUILD/libdtrain.a"; do
    [ -f "$f" ] || { echo "install: $f missing: run make first" >&2; exit 1; }
done
mkdir -p "$PREFIX" && PREFIX=$(cd "$PREFIX" && pwd)
PY="$PREFIX/lib/python3/dist-packages"

install -d "$PREFIX/bin" "$PREFIX/lib/pkgconfig" "$PREFIX/include" "$PY/dtrain"
install -m 755 "$BUILD/dtrain" "$PREFIX/bin/dtrain"
install -m 755 "$BUILD/libdtrain.so.$VERSION" "$PREFIX/lib/"
ln -sf "libdtrain.so.$VERSION" "$PREFIX/lib/libdtrain.so.$ABI"
ln -sf "libdtrain.so.$ABI" "$PREFIX/lib/libdtrain.so"
install -m 644 "$BUILD/libdtrain.a" "$PREFIX/lib/"
install -m 644 include/dtrain.h "$PREFIX/include/"
install -m 644 python/dtrain/*.py "$PY/dtrain/"

# Static linking (pkg-config --static) needs the runtime's own libraries.
cat > "$PREFIX/lib/pkgconfig/dtrain.pc" <<PC
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: dtrain
Description: parameter-server training runtime: train a program's own model on dtrain
Version: $VERSION
Requires.private: grpc gpr libcjson openblas zlib
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ldtrain
Libs.private: -lprotobuf-nanopb -lpthread -lm
Cflags: -I\${includedir}
PC
echo "install: dtrain $VERSION under $PREFIX"
