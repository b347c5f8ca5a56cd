"""torchrun, with its TCP stores listening on 127.0.0.1 only (notebook 17).

``python -m helpers._torchrun ARGS`` runs torchrun's own ``main`` (``torch.distributed.run``:
the same agent, rendezvous, restarts and failure reports) after one change: the TCP stores
it hosts — the rendezvous store and the store its ranks share — are given a socket already
bound to 127.0.0.1 (``TCPStore(..., master_listen_fd=...)``). Left alone, torch's TCPStore
server listens on every interface ("::"), whatever host name it is given; the lab's servers
bind the loopback only."""

import socket
import sys

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

_TCPStore = dist.TCPStore


class LoopbackTCPStore(_TCPStore):
    """A ``TCPStore`` whose server (``is_master=True``) listens on 127.0.0.1 only."""

    def __init__(self, host_name, port=0, *args, is_master=False, **kwargs):
        if is_master and kwargs.get("master_listen_fd") is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            kwargs["master_listen_fd"] = sock.detach()
            kwargs["use_libuv"] = True  # the libuv server takes a listening socket
        super().__init__(host_name, port, *args, is_master=is_master, **kwargs)


dist.TCPStore = LoopbackTCPStore
c10d_rendezvous_backend.TCPStore = LoopbackTCPStore

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.exit(main())
