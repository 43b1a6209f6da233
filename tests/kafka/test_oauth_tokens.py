"""The OIDC client-credentials token provider against a real HTTP token endpoint on loopback: one request for many
connections, a new token before the old one expires, the secret file read at each request, refusals and silence
named without the secret."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pytest

from tests.kafka.oidc_issuer import OidcIssuer
from worker.client._oauth import ClientCredentialsTokens
from worker.errors import TokenError


@pytest.fixture
def issuer() -> OidcIssuer:
    served = OidcIssuer(clients={"worker": "right-secret"})
    yield served
    served.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_token_serves_every_connection_until_a_fifth_of_its_life_is_left(issuer: OidcIssuer) -> None:
    issuer.token_seconds = 100
    clock = _Clock()
    tokens = ClientCredentialsTokens(issuer.token_url, "worker", lambda: "right-secret", scope="kafka", clock=clock)

    async def scenario() -> list[str]:
        first = await asyncio.gather(*(tokens.token() for _ in range(20)))
        clock.now += 79  # 21 s of 100 left: still more than a fifth
        kept = await tokens.token()
        clock.now += 2  # 19 s left: renewed
        renewed = await tokens.token()
        return [*set(first), kept, renewed]

    first, kept, renewed = asyncio.run(scenario())
    assert kept == first
    assert renewed != first
    assert issuer.requests == 2


def test_the_secret_file_is_read_at_every_request(issuer: OidcIssuer, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("old-secret\n")
    issuer.clients["worker"] = "rotated-secret"
    issuer.token_seconds = 1  # every call asks again
    tokens = ClientCredentialsTokens(issuer.token_url, "worker", lambda: secret.read_text().strip())
    with pytest.raises(TokenError) as refused:
        asyncio.run(tokens.token())
    secret.write_text("rotated-secret\n")
    assert asyncio.run(tokens.token()).count(".") == 2
    assert refused.value.cause == "authentication"


def test_a_refusal_names_the_endpoint_client_and_error_code_but_no_secret(issuer: OidcIssuer) -> None:
    tokens = ClientCredentialsTokens(issuer.token_url, "worker", lambda: "wrong-secret-123")
    with pytest.raises(TokenError) as refused:
        asyncio.run(tokens.token())
    message = str(refused.value)
    assert message == f"OIDC token endpoint {issuer.token_url}: refused client 'worker' with HTTP 401 (invalid_client)"
    assert "wrong-secret-123" not in message
    assert isinstance(refused.value, ConnectionError), "the Kafka client retries a connection error"


def test_an_endpoint_that_does_not_answer_times_out() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection and never answers
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(silent.accept()[0]), daemon=True).start()
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/token"
    tokens = ClientCredentialsTokens(url, "worker", lambda: "s", timeout_s=0.3)
    try:
        with pytest.raises(TokenError, match=r"unreachable: no answer within 0.3 s") as silence:
            asyncio.run(tokens.token())
        assert silence.value.cause == "unreachable"
    finally:
        for sock in (*held, silent):
            sock.close()


def test_a_token_without_expires_in_lives_until_its_exp_claim(issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    clock = _Clock()
    tokens = ClientCredentialsTokens(issuer.token_url, "worker", lambda: "right-secret", clock=clock)
    answer = issuer.answer

    def without_lifetime(authorization: str, form: dict[str, list[str]]) -> tuple[int, dict[str, object]]:
        status, body = answer(authorization, form)
        body.pop("expires_in", None)
        return status, body

    monkeypatch.setattr(issuer, "answer", without_lifetime)
    issuer.token_seconds = 600
    first = asyncio.run(tokens.token())
    clock.now += 400  # 200 s of 600 left
    assert asyncio.run(tokens.token()) == first
    clock.now += 100  # 100 s left: under a fifth
    assert asyncio.run(tokens.token()) != first
