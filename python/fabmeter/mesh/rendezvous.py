"""The coordination channel between ranks: TCP, JSON frames, HMAC-SHA-256.

Rank 0 listens; every other rank connects. Each side first sends a fresh
nonce (one bare JSON line); from then on every frame is one line

    {"seq": N, "body": {...}, "mac": HMAC-SHA-256(key, direction \0 seq \0 body)}

with key = HMAC-SHA-256(token, "fabmeter-mesh-v1" \0 rank nonce \0 coordinator nonce),
so a frame proves its sender knows the token, belongs to this connection
(fresh nonces on both sides) and comes in order (seq), in its direction.
Lines are at most MAX_FRAME bytes; a longer line, bad JSON, a wrong mac or
seq end the connection. What a body may hold is checked by its reader
(run.py); no body names a file or a path.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import stat
import threading
import time
from typing import Optional

from fabmeter.errors import EXIT_RUNTIME, EXIT_USAGE, FabmeterError

MAX_FRAME = 64 * 1024
MIN_TOKEN, MAX_TOKEN = 16, 4096
NONCE_BYTES = 32
TO_COORDINATOR, TO_RANK = "to-coordinator", "to-rank"


class ChannelError(Exception):
    """The other end went away or broke the protocol: the connection is over."""


def read_token(token_file: Optional[str], environ: dict) -> bytes:
    """The shared secret from --token-file or $FABMETER_TOKEN (b"" if neither), by serve's rules
    (docs/security.md): trailing whitespace dropped, 16 to 4096 bytes, a file no other user may read."""
    if token_file is not None:
        data = _read_token_file(token_file)
    else:
        data = environ.get("FABMETER_TOKEN", "").encode()
    data = data.rstrip()
    if data and not MIN_TOKEN <= len(data) <= MAX_TOKEN:
        raise FabmeterError(f"the token must be {MIN_TOKEN} to {MAX_TOKEN} bytes, not {len(data)}", EXIT_USAGE)
    return data


def _read_token_file(token_file: str) -> bytes:
    """The file's bytes; anything but a regular file other users cannot read is refused at once
    (O_NONBLOCK: a FIFO would otherwise block the open until someone writes to it)."""
    try:
        fd = os.open(token_file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise FabmeterError(f"--token-file {token_file}: {e.strerror}", EXIT_USAGE) from e
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FabmeterError(f"--token-file {token_file}: not a regular file", EXIT_USAGE)
        if mode & stat.S_IROTH:
            raise FabmeterError(f"--token-file {token_file} is readable by every user (chmod 600 it)", EXIT_USAGE)
        try:
            return f.read(MAX_TOKEN + 64)
        except OSError as e:
            raise FabmeterError(f"--token-file {token_file}: {e.strerror}", EXIT_USAGE) from e


class Channel:
    """One authenticated connection; send() may be called from several threads."""

    def __init__(self, sock: socket.socket, key: bytes, send_dir: str, recv_dir: str):
        self.sock, self.key = sock, key
        self.send_dir, self.recv_dir = send_dir, recv_dir
        self.send_seq = self.recv_seq = 0
        self._buf = bytearray()
        self._lock = threading.Lock()
        self.frames_sent = self.bytes_sent = self.frames_received = self.bytes_received = 0   # lines, with "\n"

    def _mac(self, direction: str, seq: int, body: bytes) -> str:
        return hmac.new(self.key, b"\0".join([direction.encode(), str(seq).encode(), body]),
                        hashlib.sha256).hexdigest()

    def send(self, body: dict) -> None:
        data = json.dumps(body, separators=(",", ":"), sort_keys=True)
        with self._lock:
            frame = {"seq": self.send_seq, "body": body,
                     "mac": self._mac(self.send_dir, self.send_seq, data.encode())}
            line = json.dumps(frame, separators=(",", ":"), sort_keys=True).encode() + b"\n"
            if len(line) > MAX_FRAME:
                raise ChannelError(f"frame of {len(line)} bytes is over the {MAX_FRAME} limit")
            self.send_seq += 1
            self.frames_sent += 1
            self.bytes_sent += len(line)
            try:
                self.sock.sendall(line)
            except OSError as e:
                raise ChannelError(f"send failed: {e.strerror or e}") from e

    def recv(self, timeout: Optional[float]) -> dict:
        return self._body(_read_line(self.sock, self._buf, timeout))

    def feed(self) -> list[dict]:
        """For a selector loop (one thread reading many channels): one read of what the socket has, never waiting,
        then every whole frame buffered; ChannelError as recv() raises it."""
        try:
            chunk = self.sock.recv(65536, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError as e:
            raise ChannelError(f"connection lost: {e.strerror or e}") from e
        if not chunk:
            raise ChannelError("connection closed")
        self._buf.extend(chunk)
        out = []
        while b"\n" in self._buf:
            end = self._buf.index(b"\n")
            if end > MAX_FRAME:
                raise ChannelError(f"frame over the {MAX_FRAME}-byte limit")
            line = bytes(self._buf[:end])
            del self._buf[:end + 1]
            out.append(self._body(line))
        if len(self._buf) > MAX_FRAME:
            raise ChannelError(f"frame over the {MAX_FRAME}-byte limit")
        return out

    def _body(self, line: bytes) -> dict:
        self.frames_received += 1
        self.bytes_received += len(line) + 1
        frame = _parse_line(line)
        body, seq, mac = frame.get("body"), frame.get("seq"), frame.get("mac")
        if not isinstance(body, dict) or seq != self.recv_seq or not isinstance(mac, str):
            raise ChannelError("malformed frame")
        data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        if not hmac.compare_digest(mac, self._mac(self.recv_dir, seq, data)):
            raise ChannelError("authentication failed (wrong token)")
        self.recv_seq += 1
        return body

    def shutdown(self) -> None:
        """Ends the connection both ways; a thread blocked in recv() returns."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _read_line(sock: socket.socket, buf: bytearray, timeout: Optional[float]) -> bytes:
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in buf:
        if len(buf) > MAX_FRAME:
            raise ChannelError(f"frame over the {MAX_FRAME}-byte limit")
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise ChannelError("timed out")
        try:
            sock.settimeout(left)
            chunk = sock.recv(65536)
        except socket.timeout as e:
            raise ChannelError("timed out") from e
        except OSError as e:
            raise ChannelError(f"connection lost: {e.strerror or e}") from e
        if not chunk:
            raise ChannelError("connection closed")
        buf.extend(chunk)
    end = buf.index(b"\n")
    if end > MAX_FRAME:
        raise ChannelError(f"frame over the {MAX_FRAME}-byte limit")
    line = bytes(buf[:end])
    del buf[:end + 1]
    return line


def _parse_line(line: bytes) -> dict:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ChannelError("frame is not JSON") from e
    if not isinstance(obj, dict):
        raise ChannelError("frame is not a JSON object")
    return obj


def _nonce_frame() -> tuple[bytes, bytes]:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce, json.dumps({"nonce": nonce.hex()}).encode() + b"\n"


def _their_nonce(sock: socket.socket, buf: bytearray, timeout: float) -> bytes:
    value = _parse_line(_read_line(sock, buf, timeout)).get("nonce")
    try:
        nonce = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        nonce = b""
    if len(nonce) != NONCE_BYTES:
        raise ChannelError("malformed nonce")
    return nonce


def _key(token: bytes, rank_nonce: bytes, coord_nonce: bytes) -> bytes:
    return hmac.new(token, b"fabmeter-mesh-v1\0" + rank_nonce + b"\0" + coord_nonce, hashlib.sha256).digest()


def connect(host: str, port: int, token: bytes, timeout: float) -> Channel:
    """A rank's connection to rank 0, retried until `timeout` (rank 0 may start later)."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise FabmeterError(f"rank 0 ({host} port {port}) did not answer within {timeout:g} s ({last})",
                                EXIT_RUNTIME)
        try:
            sock = socket.create_connection((host, port), timeout=min(left, 2.0))
            break
        except OSError as e:
            last = e.strerror or str(e)
            time.sleep(min(0.2, max(left, 0)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    try:
        nonce, line = _nonce_frame()
        sock.sendall(line)
        theirs = _their_nonce(sock, buf, max(deadline - time.monotonic(), 1.0))
    except (OSError, ChannelError) as e:
        sock.close()
        raise FabmeterError(f"rank 0 ({host} port {port}): {e}", EXIT_RUNTIME) from e
    channel = Channel(sock, _key(token, nonce, theirs), TO_COORDINATOR, TO_RANK)
    channel._buf = buf
    return channel


def accept(server: socket.socket, token: bytes, timeout: float) -> Channel:
    """One rank's connection at rank 0 (its nonce exchanged; its first frame still to read)."""
    sock, _ = server.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    try:
        theirs = _their_nonce(sock, buf, timeout)
        nonce, line = _nonce_frame()
        sock.sendall(line)
    except (OSError, ChannelError):
        sock.close()
        raise
    channel = Channel(sock, _key(token, theirs, nonce), TO_RANK, TO_COORDINATOR)
    channel._buf = buf
    return channel
