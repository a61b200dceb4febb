"""weaken_version_need.py LIB VERSION: marks LIB's need for symbol version VERSION as weak (VER_FLG_WEAK).

The dynamic loader then loads LIB where no library defines VERSION, instead of refusing it. Used for the one GCC 13
symbol (std::ios_base_library_init, GLIBCXX_3.4.32) of trixie's Level Zero loader on bookworm, whose libstdc++ stops at
3.4.30; install.sh supplies that symbol. Edits the ELF file in place: 64-bit little-endian only.
"""
import struct
import sys

SHT_GNU_VERNEED = 0x6FFFFFFE
VER_FLG_WEAK = 0x2


def weaken(path: str, version: bytes) -> int:
    data = bytearray(open(path, "rb").read())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    weakened = 0
    for _name, kind, _flags, _addr, offset, _size, link, info, _align, _entsize in sections:
        if kind != SHT_GNU_VERNEED:
            continue
        strings = sections[link][4]
        entry = offset
        for _ in range(info):  # one Verneed per library, each with its Vernaux list of versions
            _version, count, _file, aux_at, next_entry = struct.unpack_from("<HHIII", data, entry)
            aux = entry + aux_at
            for _ in range(count):
                _hash, flags, _other, name, next_aux = struct.unpack_from("<IHHII", data, aux)
                end = data.index(b"\0", strings + name)
                if bytes(data[strings + name:end]) == version:
                    struct.pack_into("<H", data, aux + 4, flags | VER_FLG_WEAK)
                    weakened += 1
                aux += next_aux
            entry += next_entry
    open(path, "wb").write(data)
    return weakened


if __name__ == "__main__":
    lib, wanted = sys.argv[1], sys.argv[2]
    if weaken(lib, wanted.encode()) == 0:
        raise SystemExit(f"{lib} does not need {wanted}")
