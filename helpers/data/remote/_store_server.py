"""The object store's child process: an S3-compatible server (moto) and latency proxies.

Started by :class:`helpers.ObjectStore` as a plain script (``python _store_server.py``), so
it imports neither torch nor the lab. It binds 127.0.0.1 only, on ports the kernel picks,
and talks to its parent in JSON lines: it prints the server's port and the credentials of
the user it created, then answers commands read from stdin —

- ``{"cmd": "proxy", "latency_s": 0.05, "bandwidth": 1e7, "concurrency": 8}``: start a proxy to
  the server that delays every byte by half the round trip in each direction, sends at most
  ``bandwidth`` bytes/s per connection, and serves at most ``concurrency`` requests at once (the
  others wait in it, in the order they came: the store's own limit); answers
  ``{"port": ..., "pid": ...}``;
- ``{"cmd": "stats"}``: connections, bytes and CPU seconds of each proxy;
- ``{"cmd": "log", "port": ...}``: what that proxy saw of each connection since the last
  ``log`` (its request line, and when its bytes passed: ``time.perf_counter``, one clock
  for every process on Linux);
- end of input (the parent closed the pipe or died): stop everything and exit; the child
  also exits when its parent process is gone (a thread watches it).

Each proxy runs in a process of its own (``python _store_server.py proxy PORT LATENCY
BANDWIDTH``, a child of this one), in one thread that waits on all its sockets at once
(``selectors``): the network it models costs little CPU and does not share the server's
GIL, so under load the wire still adds what it is set to, and what slows down is the
server (measured apart: its own process).

moto's server (werkzeug) closes each connection after one response, so every request is a
new connection through the proxy; the proxy delays bytes, not connection set-up.

Authentication is on: the server allows three unauthenticated calls (to create a user,
give it a policy and an access key), then checks every request's signature, so wrong
credentials fail as they would on S3.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import time

# Run as a script, Python puts this folder first on sys.path, where the lab's modules would shadow
# the libraries moto imports (requests.py here is the lab's, not the HTTP library): drop it.
if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"  # read by moto's settings when imported
os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")

CHUNK = 64 * 1024


# -- the proxy (its own process) ----------------------------------------------------------------
class _Direction:
    """One direction of one connection: bytes read from ``source`` leave for ``sink``
    ``delay_s`` after they arrived, at most ``bandwidth`` bytes/s (store and forward: a chunk
    leaves when it has arrived and the link has carried it, its size / bandwidth after the
    previous one). Reading goes on while earlier bytes wait, so the delay is a latency."""

    def __init__(self, source, sink, delay_s: float, bandwidth: float | None, log: dict, marks: tuple):
        self.source, self.sink, self.delay_s, self.bandwidth = source, sink, delay_s, bandwidth
        self.log, self.marks = log, marks  # (first byte in, first byte out, last byte out)
        self.queue: collections.deque = collections.deque()  # (due, bytes), due in arrival order
        self.pending = b""  # the part of a chunk the sink did not take yet
        self.free_at = 0.0
        self.eof = False  # the source closed
        self.done = False  # everything forwarded and the sink's write side shut
        self.held = False  # the store has no slot for this request yet: nothing leaves

    def next_send(self) -> float | None:
        """When the next chunk may leave (None: nothing waits, the sink is full, or held)."""
        if self.pending or not self.queue or self.held:
            return None
        due, data = self.queue[0]
        return max(due, self.free_at) + (len(data) / self.bandwidth if self.bandwidth else 0.0)

    def received(self, data: bytes, now: float) -> None:
        if self.marks[0] not in self.log:
            self.log[self.marks[0]] = now
            if self.marks[0] == "request_in":  # the request line: "GET /bucket/key HTTP/1.1"
                self.log["line"] = data.split(b"\r\n", 1)[0].decode("latin-1")[:300]
        self.queue.append((now + self.delay_s, data))

    def send_due(self, now: float, stats: dict) -> None:
        """Send what is due; keep what the sink cannot take yet (sent when it can). Raises
        OSError if the sink is gone."""
        while True:
            if not self.pending:
                at = self.next_send()
                if at is None or at > now:
                    break
                self.free_at = at
                self.pending = self.queue.popleft()[1]
            try:
                sent = self.sink.send(self.pending)
            except BlockingIOError:
                return
            self.pending = self.pending[sent:]
            stats["bytes"] += sent
            stamp = time.perf_counter()
            self.log.setdefault(self.marks[1], stamp)
            self.log[self.marks[2]] = stamp
            if self.pending:
                return
        if self.eof and not self.queue and not self.done:
            self.done = True
            try:
                self.sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass


class _Connection:
    def __init__(self, client, upstream, latency_s: float, bandwidth: float | None, log: dict):
        half = latency_s / 2
        self.client, self.upstream = client, upstream
        self.up = _Direction(client, upstream, half, None, log, ("request_in", "request_out", "request_end"))
        self.down = _Direction(
            upstream, client, half, bandwidth, log, ("response_in", "response_out", "response_end")
        )
        self.masks = {client: 0, upstream: 0}  # what the selector watches on each socket
        self.admitted = True  # it holds one of the store's slots (with a concurrency limit)

    def reading(self, sock) -> _Direction:
        return self.up if sock is self.client else self.down

    def watch(self, selector) -> None:
        """Watch a socket for reading until its peer closed it, and for writing while bytes
        wait that it could not take."""
        for sock, source, sink in ((self.client, self.up, self.down), (self.upstream, self.down, self.up)):
            mask = 0 if source.eof else selectors.EVENT_READ
            mask |= selectors.EVENT_WRITE if sink.pending else 0
            if mask != self.masks[sock]:
                if not self.masks[sock]:
                    selector.register(sock, mask, self)
                elif mask:
                    selector.modify(sock, mask, self)
                else:
                    selector.unregister(sock)
                self.masks[sock] = mask

    def close(self, selector) -> None:
        for sock in (self.client, self.upstream):
            if self.masks[sock]:
                selector.unregister(sock)
            sock.close()


def proxy_main(server_port: int, latency_s: float, bandwidth: float | None,
               concurrency: int | None = None) -> None:
    """One proxy: answers ``stats`` and ``log`` on stdin; exits at the end of its input or
    when its parent (the store's process) is gone. With ``concurrency``, at most that many
    connections (each one request: moto closes it after its response) are forwarded at once; a
    request beyond them is read and held until one ends, first come first served, and the log
    notes when it was let through (``admitted``)."""
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "commands")
    stats = {"connections": 0, "bytes": 0}
    log: list[dict] = []
    connections: set[_Connection] = set()
    waiting: collections.deque[_Connection] = collections.deque()  # beyond the limit, in arrival order
    commands = b""
    _say({"port": listener.getsockname()[1], "pid": os.getpid()})
    while True:
        now = time.perf_counter()
        for conn in list(connections):
            try:
                conn.up.send_due(now, stats)
                conn.down.send_due(now, stats)
            except OSError:  # a peer went away: drop the connection
                conn.up.done = conn.down.done = True
            if conn.up.done and conn.down.done:
                conn.close(selector)
                connections.discard(conn)
                if conn in waiting:
                    waiting.remove(conn)
            else:
                conn.watch(selector)
        active = sum(1 for c in connections if c.admitted)
        while waiting and (concurrency is None or active < concurrency):
            conn = waiting.popleft()
            conn.admitted, conn.up.held = True, False
            conn.up.log["admitted"] = now
            active += 1
        times = [t for c in connections for d in (c.up, c.down) if (t := d.next_send()) is not None]
        timeout = max(0.0, min(times) - time.perf_counter()) if times else None
        for key, events in selector.select(timeout):
            now = time.perf_counter()
            if key.data == "listener":
                made = _accept(listener, server_port, latency_s, bandwidth, connections, log, stats, now)
                for conn in made:
                    if concurrency is not None:  # admitted in turn at the top of the loop
                        conn.admitted, conn.up.held = False, True
                        waiting.append(conn)
            elif key.data == "commands":
                chunk = os.read(sys.stdin.fileno(), 65536)
                if not chunk:  # the store closed our input: stop
                    for conn in connections:
                        conn.close(selector)
                    listener.close()
                    return
                commands += chunk
                while b"\n" in commands:
                    line, commands = commands.split(b"\n", 1)
                    if json.loads(line)["cmd"] == "stats":
                        _say({**stats, "cpu_s": time.process_time()})
                    else:  # "log": what was seen since the last call, then forgotten
                        entries, log[:] = list(log), []
                        _say({"log": entries})
            elif events & selectors.EVENT_READ:
                conn = key.data
                direction = conn.reading(key.fileobj)
                try:
                    data = key.fileobj.recv(CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    direction.received(data, now)
                else:
                    direction.eof = True
            # a socket ready for writing: the loop above sends what waits for it


def _accept(listener, server_port, latency_s, bandwidth, connections, log, stats, now) -> list[_Connection]:
    """Accepts every client waiting to connect; returns their connections."""
    accepted: list[_Connection] = []
    while True:
        try:
            client, _ = listener.accept()
        except BlockingIOError:
            return accepted
        try:
            upstream = socket.create_connection(("127.0.0.1", server_port))  # loopback: at once
        except OSError:  # the server is stopping: refuse this client, keep accepting
            client.close()
            continue
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        entry = {"accepted": now}
        log.append(entry)
        stats["connections"] += 1
        conn = _Connection(client, upstream, latency_s, bandwidth, entry)
        connections.add(conn)
        accepted.append(conn)


# -- the store's process --------------------------------------------------------------------
class ProxyProcess:
    """The store's handle on one proxy's process (see :func:`proxy_main`)."""

    def __init__(self, server_port: int, latency_s: float, bandwidth: float | None,
                 concurrency: int | None = None):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "proxy", str(server_port), repr(latency_s), repr(bandwidth),
             repr(concurrency)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        hello = self.ask(None)
        self.port, self.pid = hello["port"], hello["pid"]

    def ask(self, command: dict | None) -> dict:
        if command is not None:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("a proxy's process ended")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(timeout=5)


def _make_user(port: int) -> tuple[str, str]:
    """The three unauthenticated calls: a user, a policy allowing S3, an access key."""
    import boto3

    iam = boto3.client(
        "iam",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="setup",
        aws_secret_access_key="setup",
    )
    iam.create_user(UserName="learner")
    iam.put_user_policy(
        UserName="learner",
        PolicyName="s3",
        PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        ),
    )
    key = iam.create_access_key(UserName="learner")["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def _say(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _watch_parent(parent: int) -> None:
    """Exit when the parent process is gone. End of input on stdin says so too, but a
    DataLoader worker forked by the parent inherits the pipe's write end and keeps it open
    until it exits; this does not wait for that."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main() -> None:
    import logging

    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    access_key, secret_key = _make_user(port)
    _say({"port": port, "access_key": access_key, "secret_key": secret_key, "pid": os.getpid()})
    proxies: list[ProxyProcess] = []
    try:
        for line in sys.stdin:
            command = json.loads(line)
            if command["cmd"] == "proxy":
                proxy = ProxyProcess(port, float(command["latency_s"]), command.get("bandwidth"),
                                     command.get("concurrency"))
                proxies.append(proxy)
                _say({"port": proxy.port, "pid": proxy.pid})
            elif command["cmd"] == "stats":
                stats = [{"port": p.port, "pid": p.pid, **p.ask({"cmd": "stats"})} for p in proxies]
                _say({"proxies": stats})
            elif command["cmd"] == "log":
                proxy = next((p for p in proxies if p.port == command["port"]), None)
                _say({"log": [] if proxy is None else proxy.ask({"cmd": "log"})["log"]})
            else:
                _say({"error": f"unknown command {command['cmd']!r}"})
    finally:
        for proxy in proxies:
            proxy.close()
        server.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["proxy"]:
        bandwidth = None if sys.argv[4] == "None" else float(sys.argv[4])
        concurrency = None if sys.argv[5:6] in ([], ["None"]) else int(sys.argv[5])
        proxy_main(int(sys.argv[2]), float(sys.argv[3]), bandwidth, concurrency)
    else:
        main()
