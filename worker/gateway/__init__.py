"""`worker gateway`: the output and display topics served over HTTP as AG-UI server-sent events, live, to late
joiners and across dropped connections. The server itself (aiohttp, the Kafka tail) loads with
`worker.gateway.server`, for the `gateway` command only."""

from worker.gateway.keys import read_key
from worker.gateway.settings import GatewaySettings
from worker.gateway.tokens import Grant, TokenCheck, mint_jwt, mint_token

__all__ = ["GatewaySettings", "Grant", "TokenCheck", "mint_jwt", "mint_token", "read_key"]
