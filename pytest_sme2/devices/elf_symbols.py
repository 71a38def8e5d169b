"""Function symbols of an ELF shared library, by file offset: what names the code a qemu log
shows executed (:mod:`pytest_sme2.devices.qemu_log`), since the guest maps a library's code by
file offset wherever its loader chooses."""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

from pytest_sme2.errors import TraceError


class ElfSymbols:
    """Function symbols of one ELF file, looked up by file offset (mappings are by offset)."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        data = path.read_bytes()
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise TraceError(path, "not a 64-bit little-endian ELF file")
        phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
        # (file offset, vaddr, file size) of the loadable segments, to turn addresses into offsets
        self._segments = []
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", data, phoff + i * phentsize
            )
            if p_type == 1:  # PT_LOAD
                self._segments.append((p_offset, p_vaddr, p_filesz))
        sections = [
            struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
        ]
        # the full symbol table when not stripped, else the dynamic one (exported functions only)
        tables = [s for s in sections if s[1] == 2] or [s for s in sections if s[1] == 11]
        entries: dict[int, tuple[int, str]] = {}
        for _, _, _, _, offset, size, link, _, _, entsize in tables:
            strtab = sections[link][4]
            for pos in range(offset, offset + size, entsize):
                name, info, _, shndx, value, sym_size = struct.unpack_from("<IBBHQQ", data, pos)
                if info & 0xF in (2, 10) and shndx != 0 and value:  # STT_FUNC, STT_GNU_IFUNC
                    end = data.index(b"\0", strtab + name)
                    entries.setdefault(value, (sym_size, data[strtab + name : end].decode()))
        self._starts = sorted(entries)
        self._entries = [entries[start] for start in self._starts]
        self._by_name = {name: start for start, (_, name) in entries.items()}

    def file_offset(self, function: str) -> int | None:
        """Where ``function`` starts in the file, or None when it has no such symbol."""
        vaddr = self._by_name.get(function)
        if vaddr is None:
            return None
        return next((o + vaddr - v for o, v, n in self._segments if v <= vaddr < v + n), None)

    def lookup(self, file_offset: int) -> str | None:
        """The function containing ``file_offset`` (size 0: the nearest one before it)."""
        vaddr = next(
            (v + file_offset - o for o, v, n in self._segments if o <= file_offset < o + n), None
        )
        if vaddr is None:
            return None
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        size, name = self._entries[i]
        return name if size == 0 or vaddr < self._starts[i] + size else None
