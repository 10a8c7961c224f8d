"""A workspace as a deterministic tar, named by its sha256, and gzipped.

The tar depends only on the selected paths, their bytes and their owner's exec bit: paths sorted
folder by folder, folders (the parents of files) then files, modification times 0, owner and group
0 with empty names, modes 0755 (folders, and files whose owner may execute them) or 0644, regular
files and folders only, in the POSIX (pax) format, which takes any path length and UTF-8 names. So
the same folder packs to the same tar on any machine, whatever its file times, owners, umask or
the order its files were made in.

The sha256 is of the uncompressed tar: gzip's output differs between zlib builds and levels, so
the compressed bytes cannot name the content. The gzip stream (level 6, as `gzip` and `tar czf`
use; no file name, modification time 0 in its header) is written as the tar is, in one pass, and
the pod checks the sha256 of what it decompresses.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import queue
import stat
import tarfile  # its type flags; the headers are written here (see _header)
import threading
from pathlib import Path
from typing import BinaryIO

from ddpctl.errors import SpecError, printable
from ddpctl.records import record

from .scan import Finding, scan
from .select import File, Selection, leave_out_with, select

GZIP_LEVEL = 6  # gzip's and tar czf's default: level 9 costs twice the time for ~1% here
_SHOWN = 5  # names of left-out paths the summary line shows, per reason
FIELD = "workspace"


BLOCK = 512
RECORD = 20 * BLOCK  # a tar ends with two zero blocks, padded to a whole record
_CHUNK = 1 << 20  # the tar stream goes to the hash and the compressor in chunks of this size
_MAGIC = b"ustar\x0000"  # POSIX ustar, as Python's tarfile writes the pax format
_PAX_NAME = b"././@PaxHeader"
_ZEROS = bytes(BLOCK)
_MAX_OCTAL = 8**11  # a size field holds 11 octal digits: a file this large needs a pax record
# SCAN_LIMIT <= _CHUNK (tested): a file that is scanned is read in one piece


def _octal(n: int, digits: int) -> bytes:
    return b"%0*o\0" % (digits - 1, n)


# The header's fields after the name: mode | uid, gid | size | mtime, checksum, type | ... The fixed
# parts are made once, and the checksum (the sum of the header's bytes, its own field as spaces)
# from their sums: a header per file is most of the work for a tree of small files.
_IDS = _octal(0, 8) * 2
_AFTER_SIZE = _octal(0, 12) + b"        "
_TAIL = bytes(100) + _MAGIC + bytes(64 + 16 + 155 + 12)  # link, magic, names, device, prefix, pad
_FIXED_SUM = sum(_IDS) + sum(_AFTER_SIZE) + sum(_TAIL)


def _header(name: bytes, mode: int, size: int, typeflag: bytes) -> bytes:
    """One ustar header block, as Python's tarfile writes it (uid, gid and mtime 0, no names)."""
    name = name[:100]
    mode_field, size_field = _octal(mode, 8), _octal(size, 12)
    checksum = sum(name) + sum(mode_field) + sum(size_field) + typeflag[0] + _FIXED_SUM
    return b"".join(
        (
            name.ljust(100, b"\0"),
            mode_field,
            _IDS,
            size_field,
            _octal(0, 12),
            b"%06o\0 " % checksum,
            typeflag,
            _TAIL,
        )
    )


def _pax_record(key: bytes, value: bytes) -> bytes:
    """`<length> key=value\n`, the length counting its own digits."""
    body = len(key) + len(value) + 3
    length = body + len(str(body))
    if len(str(length)) != len(str(body)):
        length = body + len(str(length))
    return b"%d %s=%s\n" % (length, key, value)


def _member(path: str, mode: int, size: int, directory: bool) -> bytes:
    """A member's header blocks: a pax extended header first when the path is not ASCII or longer
    than 100 characters, or the size does not fit the header (as tarfile's pax format does)."""
    name = path + "/" if directory else path
    records = b""
    if not name.isascii() or len(name) > 100:
        records += _pax_record(b"path", name.encode("utf-8"))
    if size >= _MAX_OCTAL:
        records += _pax_record(b"size", str(size).encode())
        size = 0
    out = b""
    if records:
        out = _header(_PAX_NAME, 0, len(records), tarfile.XHDTYPE) + records + bytes(-len(records) % BLOCK)
    encoded = name.encode("ascii", "replace")
    return out + _header(encoded, mode, size, tarfile.DIRTYPE if directory else tarfile.REGTYPE)


class _Sink:
    """The tar's byte stream: hashed, counted and compressed into `out` as it is written, by a
    thread of its own (zlib and hashlib let go of the GIL), in chunks: while it compresses one, the
    caller reads the next files, as `tar | gzip` does in two processes. `out` None: hashed only."""

    def __init__(self, out: BinaryIO | None, level: int) -> None:
        self.counted = _Counter(out)
        self.gzip = (
            gzip.GzipFile(filename="", mode="wb", compresslevel=level, fileobj=self.counted, mtime=0)
            if out is not None
            else None
        )
        self.sha = hashlib.sha256()
        self.size = 0
        self.buffer = bytearray()
        self.chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._compress, name="workspace-gzip", daemon=True)
        if self.gzip is not None:
            self.thread.start()

    def _compress(self) -> None:
        assert self.gzip is not None  # the thread is started only with a gzip stream
        while (chunk := self.chunks.get()) is not None:
            if self.error is None:
                try:
                    self.sha.update(chunk)
                    self.gzip.write(chunk)
                except BaseException as exc:  # noqa: BLE001 - `out` failed (a full disk): raised by close
                    self.error = exc

    def write(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.size += len(self.buffer)
            if self.gzip is None:
                self.sha.update(self.buffer)
            else:
                self.chunks.put(bytes(self.buffer))
            self.buffer = bytearray()

    def close(self) -> None:
        """End the tar (two zero blocks, padded to a record) and the gzip stream."""
        self.write(bytes(2 * BLOCK))
        self.write(bytes(-(self.size + len(self.buffer)) % RECORD))
        self.flush()
        self.abandon()
        if self.error is not None:
            raise self.error
        if self.gzip is not None:
            self.gzip.close()

    def abandon(self) -> None:
        """Stop the thread (after a failure, or at the end)."""
        if self.gzip is not None:
            self.chunks.put(None)
            self.thread.join()


class _Counter:
    """Counts what goes to `out` (the compressed size), without needing `out.tell()`."""

    def __init__(self, out: BinaryIO | None) -> None:
        self.out = out
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return self.out.write(data) if self.out is not None else len(data)

    def flush(self) -> None:
        if self.out is not None:
            self.out.flush()


def size_text(n: int) -> str:
    """`512 B`, `52.3 KiB`, `1.4 MiB`."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _names(paths: tuple[str, ...]) -> str:
    shown = ", ".join(printable(p) for p in paths[:_SHOWN])
    return shown + (f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else "")


@record
class Pack:
    """A packed workspace: what `pack` wrote, and what it left out."""

    root: Path
    files: int
    size: int  # the uncompressed tar's bytes
    compressed_size: int  # the .tar.gz's bytes
    sha256: str  # of the uncompressed tar: the archive's name and what the pod checks
    secrets: tuple[str, ...] = ()  # left out as likely secrets
    ignored: tuple[str, ...] = ()  # left out by .gitignore, .dockerignore, workspace.exclude
    special: tuple[str, ...] = ()  # sockets, FIFOs, devices

    @property
    def short(self) -> str:
        return self.sha256[:12]

    def summary(self) -> str:
        """The one line that says what was packed and what was left out, e.g. `workspace: 14 files,
        52.3 KiB (18.1 KiB compressed), sha256 3f2a9c1e04b7...; left out: .env, .ssh/ (likely
        secrets: name them in workspace.include to ship them); ignored: .venv/, data/`."""
        files = f"{self.files} file" + ("" if self.files == 1 else "s")
        line = (
            f"workspace: {files}, {size_text(self.size)} ({size_text(self.compressed_size)} compressed), "
            f"sha256 {self.short}..."
        )
        if self.secrets:
            line += f"; left out: {_names(self.secrets)} (likely secrets: name them in {FIELD}.include to ship them)"
        if self.ignored:
            line += f"; ignored: {_names(self.ignored)}"
        if self.special:
            line += f"; not files: {_names(self.special)}"
        return line


def pack(
    selection: Selection,
    out: BinaryIO,
    *,
    level: int = GZIP_LEVEL,
    field_name: str = FIELD,
    scan_keys: bool = True,
) -> Pack:
    """Write the selection's .tar.gz to `out` (see the module's doc); the file count, sizes and
    sha256 come back. A file that cannot be read, or changes size while it is packed, is a usage
    error naming it; so is key material in a file that would ship (`scan.py`), unless the file is
    named in `workspace.include` or `scan_keys` is False (the hash alone is wanted, nothing ships).
    It is raised once every file was read, so it names them all, and before `pack` returns: the
    Secret or the upload, which follow it, never happen."""
    sink = _Sink(out, level)
    written: set[str] = set()  # folders in the archive so far: the parents of the files
    found: list[tuple[str, Finding]] = []
    try:
        for file in selection.files:
            _add_parents(sink, written, file.path)
            try:
                finding = _add_file(sink, file, scan_keys and not file.named)
            except OSError as exc:
                problem = f"cannot be read ({exc.strerror})" if exc.strerror else str(exc)
                raise SpecError(
                    field_name,
                    f"{printable(file.path)} {problem}",
                    f"fix it, or leave it out with {leave_out_with(field_name)}",
                ) from None
            if finding is not None:
                found.append((file.path, finding))
        if found:
            raise _key_material(found, field_name)
    except BaseException:
        sink.abandon()
        raise
    sink.close()
    return Pack(
        root=selection.root,
        files=len(selection.files),
        size=sink.size,
        compressed_size=sink.counted.size,
        sha256=sink.sha.hexdigest(),
        secrets=selection.secrets,
        ignored=selection.ignored,
        special=selection.special,
    )


def _key_material(found: list[tuple[str, Finding]], field_name: str) -> SpecError:
    """The usage error for key material in files that would ship: the first by file, line and
    kind (never the key), how many more, and the fixes."""
    path, first = found[0]
    more = f" (and {len(found) - 1} more: {_names(tuple(p for p, _ in found[1:]))})" if len(found) > 1 else ""
    return SpecError(
        field_name,
        f"{printable(path)}:{first.line} holds {first.kind}{more}, which would ship with the code",
        "remove it, move it to a Secret referenced with secretEnv, or, if it is a false alarm, "
        + (
            "own the build (ddpctl build --write-dockerfile)"
            if field_name == "build"
            else f"list the file in {field_name}.include"
        ),
    )


def _add_file(sink: _Sink, file: File, scan_keys: bool) -> Finding | None:
    """A file's header, its bytes and their padding, and the key material found in them when
    `scan_keys` (a file over `SCAN_LIMIT` is not scanned). Its size and mode are taken once, when it
    is opened: a file that changes size while it is read fails, rather than pack a tar that lies."""
    fd = os.open(file.source, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        size = st.st_size
        header = _member(file.path, 0o755 if st.st_mode & stat.S_IXUSR else 0o644, size, directory=False)
        if size <= _CHUNK:  # most files: one read (which also sees a file that grew) and one write
            data = os.read(fd, size + 1)
            if len(data) != size:
                raise OSError(f"changed while it was packed ({len(data)} bytes read, not {size})")
            sink.write(header + data + _ZEROS[: -size % BLOCK])
            return scan(data) if scan_keys else None
        sink.write(header)
        left = size
        while left:
            data = os.read(fd, min(left, _CHUNK))
            if not data:
                raise OSError(f"changed while it was packed (shorter than its {size} bytes)")
            sink.write(data)
            left -= len(data)
        if os.read(fd, 1):
            raise OSError(f"changed while it was packed (longer than its {size} bytes)")
    finally:
        os.close(fd)
    sink.write(_ZEROS[: -size % BLOCK])
    return None


def _add_parents(sink: _Sink, written: set[str], path: str) -> None:
    """The folders above `path` not in the archive yet (`written`), each once, before the file."""
    parts = path.split("/")
    for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        if folder not in written:
            written.add(folder)
            sink.write(_member(folder, 0o755, 0, directory=True))


def version_of(root: Path | str) -> str:
    """The sha256 the folder `root` packs to as a workspace (`pack_workspace`'s), computed without
    compressing or scanning it: what names the version of a folder's code (a project image's tag,
    the label of an image built from the folder's own Dockerfile). It never fails for a path: a link
    that leaves the folder or points nowhere, and a file that cannot be read, are left out of it
    (the folder's own Dockerfile decides what its image holds; this only names the version). ""
    when the folder cannot be read at all (it is missing, a pattern is not valid) or a file changes
    while it is read."""
    try:
        selection = select(root, lenient=True)
    except SpecError:
        return ""
    sink = _Sink(None, GZIP_LEVEL)
    written: set[str] = set()
    for file in selection.files:
        if not os.access(file.source, os.R_OK):
            continue  # unreadable: not part of the version
        _add_parents(sink, written, file.path)
        try:
            _add_file(sink, file, scan_keys=False)
        except OSError:
            return ""  # it changed or failed while read: no version to name
    sink.close()
    return sink.sha.hexdigest()


def pack_workspace(
    root: Path | str,
    out: BinaryIO,
    exclude: tuple[str, ...] | list[str] = (),
    include: tuple[str, ...] | list[str] = (),
    *,
    field_name: str = FIELD,
    scan_keys: bool = True,
) -> Pack:
    """`select` then `pack`: the workspace `root` as a .tar.gz written to `out`."""
    selection = select(root, exclude, include, field_name=field_name)
    return pack(selection, out, field_name=field_name, scan_keys=scan_keys)
