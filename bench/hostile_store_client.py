#!/usr/bin/env python3
"""A hostile client of a strait job's store (comm/bootstrap/tcp_store_server.h), for
bench/hostile_store.sh: while the job runs, it

  1. opens --connections connections one after another and sends each random frames (random
     bytes, and well-framed bodies of random types and lengths up to the protocol's limit),
  2. replays a captured handshake: it records the first Hello/Auth exchange it can make itself
     (a Hello, the server's challenge, an Auth with a proof it cannot compute) and then sends the
     recorded bytes again on fresh connections,
  3. holds --silent connections open without sending a byte (slowloris),

and reports what the server did (closed, answered, still open). It knows nothing of the secret.
Only the Python standard library.
"""
import argparse
import os
import random
import socket
import struct
import sys
import time


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def hello() -> bytes:
    return frame(bytes([0x01]) + struct.pack(">Q", 0) + struct.pack(">IH", 0x53545254, 2)
                 + os.urandom(32))


def connect(host: str, port: int) -> socket.socket:
    s = socket.create_connection((host, port), timeout=5)
    s.settimeout(5)
    return s


def drain(s: socket.socket) -> bytes:
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--silent", type=int, default=100)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--hold", type=float, default=30.0, help="seconds to hold the silent ones")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)

    # Wait for the store to listen (the job may still be starting).
    deadline = time.time() + 60
    while True:
        try:
            connect(a.host, a.port).close()
            break
        except OSError:
            if time.time() > deadline:
                print("hostile: the store never listened", file=sys.stderr)
                return 1
            time.sleep(0.05)

    stats = {"closed": 0, "answered_beyond_challenge": 0, "errors": 0}
    for i in range(a.connections):
        try:
            s = connect(a.host, a.port)
            kind = i % 3
            if kind == 0:
                payload = os.urandom(rng.randint(1, 8192))
            elif kind == 1:
                n = rng.choice([9, 64, 128, 129, 4096, 1 << 20, (64 << 20) + 4096 + 64])
                payload = struct.pack(">I", n) + bytes([rng.randint(0, 255)]) + os.urandom(
                    min(n, 8192))
            else:
                payload = hello() + frame(bytes([rng.choice([2, 3, 4, 5, 6, 7])]) +
                                          os.urandom(rng.randint(8, 200)))
            try:
                s.sendall(payload)
            except OSError:
                pass
            s.shutdown(socket.SHUT_WR)
            reply = drain(s)
            stats["closed"] += 1
            # Only HelloOk (0x81) and Fatal (0x87) may come back before authentication.
            off = 0
            while off + 5 <= len(reply):
                (ln,) = struct.unpack(">I", reply[off:off + 4])
                if reply[off + 4] not in (0x81, 0x87):
                    stats["answered_beyond_challenge"] += 1
                off += 4 + ln
            s.close()
        except OSError:
            stats["errors"] += 1

    # A handshake captured from the wire: our Hello, then an Auth; replayed on fresh connections.
    captured = hello() + frame(bytes([0x07]) + struct.pack(">Q", 0) + os.urandom(32))
    replay_rejected = 0
    for _ in range(a.replays):
        try:
            s = connect(a.host, a.port)
            s.sendall(captured)
            reply = drain(s)
            if b"authentication failed" in reply:
                replay_rejected += 1
            s.close()
        except OSError:
            stats["errors"] += 1

    silent = []
    for _ in range(a.silent):
        try:
            silent.append(connect(a.host, a.port))
        except OSError:
            stats["errors"] += 1
    start = time.time()
    for s in silent:
        s.settimeout(max(0.1, a.hold - (time.time() - start)))
    dropped = 0
    for s in silent:
        try:
            if s.recv(1) == b"":
                dropped += 1
        except socket.timeout:
            pass
        except OSError:
            dropped += 1
        s.close()
    print(f"hostile: {a.connections} connections with random frames: {stats['closed']} closed by "
          f"the server, {stats['answered_beyond_challenge']} answered beyond the challenge, "
          f"{stats['errors']} connect errors; {replay_rejected}/{a.replays} replayed handshakes "
          f"rejected; {dropped}/{len(silent)} silent connections dropped by the server within "
          f"{time.time() - start:.1f} s")
    return 0 if stats["answered_beyond_challenge"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
