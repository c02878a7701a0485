"""The delay relay's bytes: every connection accepted on 127.0.0.1 is forwarded to one target, each chunk read in
either direction held for the delay plus a uniform share of the jitter, and released in order by a timer of
measured resolution (docs/network.md, "The delay relay"). Threads, not an event loop: asyncio's and libuv's
timers round to whole milliseconds. No queue-bench imports: this runs in the relay's own process."""

from __future__ import annotations

import ctypes
import heapq
import itertools
import random
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

#: Bytes read from a socket at a time.
CHUNK_BYTES = 65536
#: Seconds a connection to the target may take before the accepted client is closed.
CONNECT_TIMEOUT_S = 10.0
#: Waits of this many seconds the timer's resolution is measured with, and how many.
PROBE_WAIT_S, PROBE_WAITS = 200e-6, 200
#: Linux's ``SO_ATTACH_FILTER`` and ``SO_DETACH_FILTER`` (``asm-generic/socket.h``; Python names neither).
SO_ATTACH_FILTER, SO_DETACH_FILTER = 26, 27
#: A classic BPF program of one instruction, ``BPF_RET | BPF_K`` returning 0: every segment dropped, unanswered.
_DROP_ALL = (ctypes.c_uint8 * 8)(*struct.pack("HBBI", 0x06, 0, 0, 0))
#: Seconds between the keepalive probes that find the clients which gave up during a partition (:func:`probe_peer`).
HEAL_PROBE_S = 1
#: ``struct sock_fprog {len, filter*}`` pointing at it.
_DROP_PROG = struct.pack("HL", 1, ctypes.addressof(_DROP_ALL))


def drop_all(sock: socket.socket) -> None:
    """Attach a socket filter to ``sock`` that drops every segment it receives before TCP sees it: no data, no
    ACK, no RST reaches it, so its peer hears nothing back (a black hole). No privilege is needed."""
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, _DROP_PROG)


def probe_peer(sock: socket.socket) -> None:
    """TCP keepalives on ``sock`` every :data:`HEAL_PROBE_S` once it is idle that long: a peer that is gone
    answers with a reset, which ends ``sock``'s reads. Set only after a partition: a probe the peer received
    during one would tell its kernel the path is alive."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option in (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL):
        sock.setsockopt(socket.IPPROTO_TCP, option, HEAL_PROBE_S)


def undrop(sock: socket.socket) -> None:
    """Detach :func:`drop_all`'s filter from ``sock``; nothing when it has none."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
    except OSError:  # ENOENT: no filter attached
        pass


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


@dataclass
class _Direction:
    """One way of one connection: bytes from ``src`` to ``dst``; ``last_release`` keeps its chunks in order."""

    src: socket.socket
    dst: socket.socket
    pair: "_Pair"
    upstream: bool
    last_release: float = 0.0
    ended: bool = False


@dataclass(eq=False)  # hashed by identity: DelayRelay.pairs
class _Pair:
    """A client's connection and the relay's connection to the target for it."""

    client: socket.socket
    server: socket.socket
    open_ways: int = 2
    closed: bool = False
    ways: list = field(default_factory=list)


class DelayRelay:
    """Listens on 127.0.0.1 (``port``; 0: a free one), forwards each connection to ``target`` (host, port) with
    ``delay_s`` + uniform(0, ``jitter_s``) added to every chunk in each direction, order kept; the sending thread
    wakes ``early_s`` before a chunk is due (the timer's measured median lateness), so it leaves on time. The TCP
    connection to the target is made at once (set-up is not delayed). :meth:`start` runs it in two threads;
    :meth:`close` stops it. ``hold`` (a threading.Event) set: nothing is released until it is cleared.
    :meth:`partition` makes it a black hole for the clients until :meth:`heal`."""

    def __init__(self, target: tuple[str, int], delay_s: float, jitter_s: float = 0.0, *, port: int = 0,
                 early_s: float = 0.0, rng: random.Random | None = None):
        self.target, self.delay_s, self.jitter_s, self.early_s = target, delay_s, jitter_s, early_s
        self.rng = rng or random.Random()
        self.listener = socket.create_server(("127.0.0.1", port), backlog=1024)
        self.port = self.listener.getsockname()[1]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.heap: list = []
        self.seq = itertools.count()
        self.due = threading.Condition()
        self.hold = threading.Event()
        self.partitioned = False
        self.pairs: set = set()  # the open ones: a partition's filter goes on each client socket
        self.stopping = False
        self.lock = threading.Lock()  # the selector's registrations and the sockets' closing, from both threads
        self.stats = {"connections": 0, "connect_failures": 0, "bytes_to_server": 0, "bytes_to_client": 0,
                      "chunks": 0}
        self.threads = [threading.Thread(target=self._read_loop, name="relay-read", daemon=True),
                        threading.Thread(target=self._send_loop, name="relay-send", daemon=True)]

    def start(self) -> "DelayRelay":
        """Start the reading and the sending threads; returns self."""
        for thread in self.threads:
            thread.start()
        return self

    def close(self) -> None:
        """Stop both threads, close every socket and the selector (a selector left open keeps watching its sockets:
        under gevent, one at end of file wakes the loop for ever)."""
        self.stopping = True
        with self.due:
            self.due.notify()
        self.listener.close()
        for thread in self.threads:
            thread.join(timeout=2)
        for pair in list(self.pairs):
            self._close_pair(pair)
        with self.lock:
            self.selector.close()

    def _read_loop(self) -> None:
        while not self.stopping:
            try:
                events = self.selector.select(timeout=0.2)
            except (OSError, ValueError):  # the listener closed under it
                return
            for key, _ in events:
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.data)

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        try:
            server = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            self.stats["connect_failures"] += 1
            client.close()
            return
        server.settimeout(None)
        for sock in (client, server):
            _nodelay(sock)
        pair = _Pair(client, server)
        pair.ways = [_Direction(client, server, pair, True), _Direction(server, client, pair, False)]
        with self.lock:
            # a child inherits its listener's filter: one accepted as a partition began or ended gets the relay's state
            (drop_all if self.partitioned else undrop)(client)
            self.pairs.add(pair)
            for way in pair.ways:
                self.selector.register(way.src, selectors.EVENT_READ, way)
        self.stats["connections"] += 1

    def _read(self, way: _Direction) -> None:
        try:
            data = way.src.recv(CHUNK_BYTES)
        except OSError:  # reset: both sides go at once
            self._close_pair(way.pair)
            return
        if not data:
            with self.lock:
                if not way.pair.closed:
                    self.selector.unregister(way.src)
                way.ended = True
        else:
            self.stats["bytes_to_server" if way.upstream else "bytes_to_client"] += len(data)
            self.stats["chunks"] += 1
        extra = self.rng.uniform(0.0, self.jitter_s) if self.jitter_s else 0.0
        way.last_release = max(time.monotonic() + self.delay_s + extra, way.last_release)
        with self.due:
            heapq.heappush(self.heap, (way.last_release, next(self.seq), way, data))
            self.due.notify()

    def _send_loop(self) -> None:
        while not self.stopping:
            with self.due:
                if not self._due_now():
                    continue
                release, now = [], time.monotonic() + self.early_s
                while self.heap and self.heap[0][0] <= now:
                    release.append(heapq.heappop(self.heap))
            for _, _, way, data in release:
                self._send(way, data)

    def _due_now(self) -> bool:
        """Under ``due``: True when the first chunk is due and not held; else waits (until it is due, or for a
        notification: a new chunk, the hold's end, the stop) and returns False."""
        if not self.heap or self.hold.is_set():
            self.due.wait(timeout=0.5)
            return False
        wait_s = self.heap[0][0] - self.early_s - time.monotonic()
        if wait_s > 0:
            self.due.wait(timeout=wait_s)
            return False
        return True

    def _send(self, way: _Direction, data: bytes) -> None:
        if way.pair.closed:
            return
        try:
            if data:
                way.dst.sendall(data)
                return
            way.dst.shutdown(socket.SHUT_WR)
        except OSError:
            self._close_pair(way.pair)
            return
        way.pair.open_ways -= 1
        if way.pair.open_ways == 0:
            self._close_pair(way.pair)

    def _close_pair(self, pair: _Pair) -> None:
        with self.lock:
            if pair.closed:
                return
            pair.closed = True
            self.pairs.discard(pair)
            for way in pair.ways:
                if not way.ended:
                    self.selector.unregister(way.src)
            for sock in (pair.client, pair.server):
                sock.close()

    def release(self) -> None:
        """End a hold: what was held is sent now, in order."""
        self.hold.clear()
        with self.due:
            self.due.notify()

    def partition(self) -> int:
        """Become a black hole for the clients (docs/network.md, "Partitions"): :attr:`hold` every byte, and drop
        every segment that reaches the listener and each client socket (:func:`drop_all`), so no data, ACK or
        RST goes back and a new connection's SYN is not answered. The connections to the target are left as they
        are: the server learns nothing. Returns the client connections it cut."""
        with self.lock:
            self.partitioned = True
            self.hold.set()
            drop_all(self.listener)
            for pair in self.pairs:
                drop_all(pair.client)
            return len(self.pairs)

    def heal(self) -> None:
        """End :meth:`partition`: the filters detached, what was held sent in order, and each client probed
        (:func:`probe_peer`): one that gave up meanwhile answers with a reset and its pair is closed, so the
        server's end closes too (only then: in the partition it learned nothing)."""
        with self.lock:
            self.partitioned = False
            undrop(self.listener)
            for pair in self.pairs:
                undrop(pair.client)
                probe_peer(pair.client)
        self.release()


def timer_resolution_us(waits: int = PROBE_WAITS, wait_s: float = PROBE_WAIT_S) -> dict:
    """The sending thread's timer measured: ``waits`` timed waits of ``wait_s`` on a threading.Condition (as
    :meth:`DelayRelay._send_loop` waits), the lateness of each: ``{"p50_us", "p99_us", "max_us"}``."""
    cond, late = threading.Condition(), []
    with cond:
        for _ in range(waits):
            start = time.monotonic()
            cond.wait(timeout=wait_s)
            late.append((time.monotonic() - start - wait_s) * 1e6)
    late.sort()
    return {"p50_us": round(late[len(late) // 2], 1), "p99_us": round(late[int(len(late) * 0.99) - 1], 1),
            "max_us": round(late[-1], 1)}
