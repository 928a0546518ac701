#!/usr/bin/env bash
# Sourced on the GPU machine, which has CUDA and cmake but neither network nor quill's Debian packages:
# unpacks the .deb files carried in .debs/ (made here with `apt-get download libjansson-dev libjansson4
# libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
# libmicrohttpd-dev libmicrohttpd12 libcmocka-dev libcmocka0`) into /opt/qdeps and points pkg-config
# and the loader at them.
root=/opt/qdeps
if [ ! -d "$root" ]; then
  for f in .debs/*.deb; do dpkg -x "$f" "$root"; done
fi
lib=$root/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=$lib/pkgconfig:$root/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$root
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
export C_INCLUDE_PATH=$root/usr/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
export CMAKE_PREFIX_PATH=$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
