"""The object store's child process: an S3-compatible server (moto) and latency proxies.

Started by :class:`helpers.ObjectStore` as a plain script (``python _store_server.py``), so
it imports neither torch nor the lab. It binds 127.0.0.1 only, on ports the kernel picks,
and talks to its parent in JSON lines: it prints the server's port and the credentials of
the user it created, then answers commands read from stdin —

- ``{"cmd": "proxy", "latency_s": 0.05, "bandwidth": 1e7}``: start a proxy to the server
  that delays every byte by half the round trip in each direction and sends at most
  ``bandwidth`` bytes/s per connection; answers ``{"port": ...}``;
- ``{"cmd": "stats"}``: connections and bytes each proxy has carried;
- end of input (the parent closed the pipe or died): stop everything and exit; the child
  also exits when its parent process is gone (a thread watches it).

moto's server (werkzeug) closes each connection after one response, so every request is a
new connection through the proxy; the proxy delays bytes, not connection set-up.

Authentication is on: the server allows three unauthenticated calls (to create a user,
give it a policy and an access key), then checks every request's signature, so wrong
credentials fail as they would on S3.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import socket
import sys
import threading
import time

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"  # read by moto's settings when imported
os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")

CHUNK = 64 * 1024
_sequence = itertools.count()


class _Pipe:
    """One direction of one proxied connection: bytes read from ``source`` are written to
    ``sink`` ``delay_s`` later, at most ``bandwidth`` bytes/s. Reading goes on while earlier
    bytes wait, so the delay is a latency, not a stall."""

    def __init__(
        self,
        source: socket.socket,
        sink: socket.socket,
        delay_s: float,
        bandwidth: float | None,
        counter: dict,
    ):
        self.source, self.sink, self.delay_s, self.bandwidth = source, sink, delay_s, bandwidth
        self.counter = counter
        self.queue: list = []
        self.ready = threading.Condition()
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        try:
            while data := self.source.recv(CHUNK):
                with self.ready:
                    heapq.heappush(self.queue, (time.monotonic() + self.delay_s, next(_sequence), data))
                    self.ready.notify()
        except OSError:
            pass
        with self.ready:
            self.closed = True
            self.ready.notify()

    def _write(self) -> None:
        free_at = 0.0
        try:
            while True:
                with self.ready:
                    while not self.queue and not self.closed:
                        self.ready.wait()
                    if not self.queue:
                        break
                    due, _, data = heapq.heappop(self.queue)
                # store and forward: a chunk leaves when it has arrived (its delay) and the link has
                # carried it (its size / bandwidth after the previous chunk left)
                send_at = max(due, free_at) + (len(data) / self.bandwidth if self.bandwidth else 0.0)
                wait = send_at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                free_at = send_at
                self.sink.sendall(data)
                with self.counter["lock"]:
                    self.counter["bytes"] += len(data)
        except OSError:
            pass
        for sock in (self.sink, self.source):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Proxy:
    """Listens on 127.0.0.1 and forwards each connection to the server through two pipes."""

    def __init__(self, server_port: int, latency_s: float, bandwidth: float | None):
        self.server_port, self.latency_s, self.bandwidth = server_port, latency_s, bandwidth
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stats = {"connections": 0, "bytes": 0, "lock": threading.Lock()}
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.server_port))
            except OSError:  # the server is stopping: refuse this client, keep accepting
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.stats["connections"] += 1
            half = self.latency_s / 2
            _Pipe(client, upstream, half, None, self.stats)
            _Pipe(upstream, client, half, self.bandwidth, self.stats)

    def close(self) -> None:
        self.listener.close()


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
    proxies: list[Proxy] = []
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "proxy":
            proxy = Proxy(port, float(command["latency_s"]), command.get("bandwidth"))
            proxies.append(proxy)
            _say({"port": proxy.port})
        elif command["cmd"] == "stats":
            _say(
                {
                    "proxies": [
                        {"port": p.port, "connections": p.stats["connections"], "bytes": p.stats["bytes"]}
                        for p in proxies
                    ]
                }
            )
        else:
            _say({"error": f"unknown command {command['cmd']!r}"})
    for proxy in proxies:
        proxy.close()
    server.stop()


if __name__ == "__main__":
    main()
