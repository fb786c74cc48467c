#!/usr/bin/env python3
"""Writes the hand-made seeds of the `bundle_unpack` target into fuzz/seeds/bundle_unpack/.

Each seed is one selector byte and a tar stream: `0` (even) means the target zstd-compresses
the tar itself before calling `unpack`, so the fuzzer mutates tar headers directly. The tars are
built header by header with Python's tarfile, so they can hold what no packer would write:
escaping paths, links, devices, duplicate and conflicting entries, oversized and malformed
headers. Seeds with selector `1` (odd) are zstd frames made with the `zstd` command, passed to
`unpack` as they are: a packed bundle and two bombs. Re-run after changing this file:

    python3 fuzz/seeds/make_bundle_seeds.py
"""

import io
import os
import subprocess
import tarfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bundle_unpack")


def member(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, **fields):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = 0
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def tar_bytes(members, fmt=tarfile.GNU_FORMAT, encoding="utf-8"):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt, encoding=encoding) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if info.size else None)
    raw = buffer.getvalue()
    # Drop the zero padding up to tarfile's 10 KiB record, keeping the two end-of-archive
    # blocks: the seed stays small and the stream stays well formed.
    end = len(raw.rstrip(b"\0"))
    end = (end + 511) // 512 * 512
    return raw[:end] + b"\0" * 1024


def zstd(payload):
    return subprocess.run(
        ["zstd", "-q", "-3", "-c"], input=payload, stdout=subprocess.PIPE, check=True
    ).stdout


def write(name, payload, selector=b"0"):
    with open(os.path.join(OUT, name), "wb") as seed:
        seed.write(selector + payload)


def main():
    os.makedirs(OUT, exist_ok=True)
    d = tarfile.DIRTYPE
    # A bundle the way `pack` lays it out: sorted, a directory entry before its contents.
    valid = tar_bytes(
        [
            member("d/", d, mode=0o755),
            member("d/" + "n" * 150 + ".yaml", data=b"long name\n"),
            member("scenarios/", d, mode=0o755),
            member("scenarios/s.yaml", data=b"prompt: hi\nsession: ../sessions/x.yaml\n"),
            member("sessions/", d, mode=0o755),
            member("sessions/x.yaml", data=b"model: m\n"),
            member("skills/", d, mode=0o755),
            member("skills/k/", d, mode=0o755),
            member("skills/k/run.sh", data=b"#!/bin/sh\necho hi\n", mode=0o755),
        ]
    )
    write("valid-bundle.tar", valid)
    write("parent-escape.tar", tar_bytes([member("../escaped", data=b"x")]))
    write("nested-parent-escape.tar", tar_bytes([member("a/../../escaped", data=b"x")]))
    write("absolute.tar", tar_bytes([member("/tmp/absolute", data=b"x")]))
    write(
        "symlink-then-write.tar",
        tar_bytes(
            [
                member("link", tarfile.SYMTYPE, linkname=".."),
                member("link/escaped", data=b"x"),
            ]
        ),
    )
    write(
        "symlink-absolute.tar",
        tar_bytes([member("passwd", tarfile.SYMTYPE, linkname="/etc/passwd")]),
    )
    write(
        "hardlink-escape.tar",
        tar_bytes([member("h", tarfile.LNKTYPE, linkname="../../../etc/passwd")]),
    )
    write(
        "devices-and-fifo.tar",
        tar_bytes(
            [
                member("chr", tarfile.CHRTYPE, devmajor=1, devminor=3),
                member("blk", tarfile.BLKTYPE, devmajor=8, devminor=0),
                member("fifo", tarfile.FIFOTYPE),
            ]
        ),
    )
    write(
        "file-then-dir-under-it.tar",
        tar_bytes([member("a", data=b"x"), member("a/b/", d)]),
    )
    write("dir-then-file.tar", tar_bytes([member("a/", d), member("a", data=b"x")]))
    write(
        "duplicate-file.tar",
        tar_bytes([member("dup", data=b"first"), member("dup", data=b"second")]),
    )
    write(
        "setuid-and-odd-modes.tar",
        tar_bytes(
            [
                member("suid", data=b"#!/bin/sh\n", mode=0o4777),
                member("sticky/", d, mode=0o1777),
                member("none", data=b"x", mode=0),
            ]
        ),
    )
    write(
        "pax-path-escape.tar",
        tar_bytes(
            [member("innocent", data=b"x", pax_headers={"path": "../pax-escaped"})],
            fmt=tarfile.PAX_FORMAT,
        ),
    )
    write(
        "gnu-longname-escape.tar",
        tar_bytes([member("../" + "l" * 200, data=b"x")]),
    )
    write(
        "backslash-and-control.tar",
        tar_bytes([member("a\\..\\b", data=b"x"), member("c\x01d", data=b"y")]),
    )
    write(
        "non-utf8-name.tar",
        tar_bytes([member("caf\udce9", data=b"x")], encoding="utf-8"),
    )
    write(
        "many-entries.tar",
        tar_bytes([member("f%03d" % i) for i in range(80)]),
    )
    write(
        "file-over-cap.tar",
        tar_bytes([member("big", data=b"b" * (20 * 1024))]),
    )
    write("sparse.tar", tar_bytes([member("sparse", tarfile.GNUTYPE_SPARSE)]))
    # A header that claims more bytes than the stream holds.
    truncated = tar_bytes([member("cut", data=b"c" * 4096)])
    write("truncated-entry.tar", truncated[: 512 + 100])
    write("empty-archive.tar", b"\0" * 1024)

    write("valid-bundle.tar.zst", zstd(valid), selector=b"1")
    # A GNU long-name header whose "name" is 1 MiB: the tar reader buffers long names whole.
    long_name = b"n" * (1 << 20)
    write(
        "longname-bomb.tar.zst",
        zstd(tar_bytes([member("././@LongLink", tarfile.GNUTYPE_LONGNAME, data=long_name), member("x", data=b"x")])),
        selector=b"1",
    )
    # One file whose header claims 64 MiB of zeros: tiny compressed, huge decompressed.
    info = tarfile.TarInfo("zeros")
    info.size = 64 << 20
    info.mtime = 0
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    write("zero-bomb.tar.zst", zstd(header + b"\0" * (64 << 20)), selector=b"1")


if __name__ == "__main__":
    main()
