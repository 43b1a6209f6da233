"""Routing: which replica answers for which key (a run; a thread alike), and the way to it. The gateway group's
assignment gives every replica the partition -> replica map (`OwnersAssignor`, `Owners`); `Router` is the one
entry point requests take: here, loading, a peer, or nobody, and a peer's answer brought here with the signed peer
header, as a whole answer, a stream, or a relay shared by this replica's connections. Only this package talks to
peers."""

from worker.gateway.routing.forwarding import Ask, PeerKey, Unavailable, UpstreamLost
from worker.gateway.routing.group import OwnersAssignor
from worker.gateway.routing.owners import Owners, Route, Target, Where
from worker.gateway.routing.router import Router

__all__ = ["Ask", "Owners", "OwnersAssignor", "PeerKey", "Route", "Router", "Target", "Unavailable", "UpstreamLost",
           "Where"]
