"""Access tokens without a broker: JWTs minted by PyJWT and by `jose` under Node grant their run or thread; each
bad token is refused with its own code; keys are read again when a token names one the gateway lacks (a rotation
needs no restart), at most once per interval however many such tokens come; v1 tokens still work."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from pathlib import Path

import jwt
import pytest

from tests.gateway.jwt_support import AUDIENCE, ISSUER, JwksServer, SigningKey, claims, mint, node_tokens
from worker.errors import ConfigError, GatewayError
from worker.gateway.keys import HmacKeys, JwksKeys, check_keys
from worker.gateway.server import main_gateway
from worker.gateway.settings import GatewaySettings
from worker.gateway.tokens import Grant, TokenCheck, mint_token

KEY = b"s" * 32
DIR_KEY = b"d" * 40


def _keys(tmp_path: Path, *, max_age_s: float = 300, min_refresh_s: float = 30) -> HmacKeys:
    (tmp_path / "gateway.key").write_bytes(KEY + b"\n")
    (tmp_path / "keys").mkdir(exist_ok=True)
    (tmp_path / "keys" / "2026-01").write_bytes(DIR_KEY)
    (tmp_path / "keys" / ".hidden").write_bytes(b"short")  # as a mounted Secret's ..data: left out
    return HmacKeys(str(tmp_path / "gateway.key"), str(tmp_path / "keys"), max_age_s, min_refresh_s)


def _check(hmac_keys: HmacKeys | None, jwks: JwksKeys | None = None) -> TokenCheck:
    return TokenCheck(hmac_keys, jwks, audience=AUDIENCE, issuer=ISSUER)


async def _refusal(check: TokenCheck, token: str) -> tuple[int, str]:
    with pytest.raises(GatewayError) as refused:
        await check.verify(token)
    assert str(refused.value), refused.value.code
    return refused.value.status, refused.value.code


def _hs256_by_hand(secret: bytes, header: dict[str, str], payload: dict[str, object]) -> str:
    """A token PyJWT will not mint: HS256 keyed with a public key's PEM (the algorithm-confusion attack)."""
    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    body = f"{part(header)}.{part(payload)}"
    signature = hmac.new(secret, body.encode(), hashlib.sha256).digest()
    return f"{body}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


async def test_v1_tokens_grant_their_run_or_thread_until_they_expire(tmp_path: Path) -> None:
    check = _check(_keys(tmp_path))
    grant = await check.verify(mint_token(KEY, "thread", "thread-1", 60))
    assert grant.allows("any-run", "thread-1") and not grant.allows("any-run", "thread-2")
    assert (await check.verify(mint_token(KEY, "run", "run-1", 60))).allows("run-1", None)
    assert await _refusal(check, mint_token(KEY, "run", "run-1", 60, now=0)) == (401, "expired-token")
    assert await _refusal(check, mint_token(b"x" * 32, "run", "run-1", 60)) == (401, "bad-token")
    assert await _refusal(_check(None, JwksKeys("http://127.0.0.1:1/", 300, 30)),
                          mint_token(KEY, "run", "run-1", 60)) == (401, "bad-token")  # fmt: skip


async def test_hs256_jwts_from_pyjwt_are_checked_with_the_key_they_name(tmp_path: Path) -> None:
    check = _check(_keys(tmp_path))
    assert await check.verify(mint(KEY, claims(run_id="run-1"))) == Grant("run", "run-1")
    assert await check.verify(mint(KEY, claims(thread_id="t-1"), kid="gateway.key")) == Grant("thread", "t-1")
    assert await check.verify(mint(DIR_KEY, claims(run_id="run-2"), kid="2026-01")) == Grant("run", "run-2")
    assert await _refusal(check, mint(DIR_KEY, claims(run_id="run-2"))) == (401, "bad-token")  # no kid: the file's
    assert await _refusal(check, mint(KEY, claims(run_id="r"), kid="2026-01")) == (401, "bad-token")
    assert await _refusal(check, mint(KEY, claims(run_id="r"), kid=".hidden")) == (401, "unknown-key")


async def test_each_bad_token_is_refused_with_its_own_code(tmp_path: Path) -> None:
    rsa_key = SigningKey("idp-rsa", "RS256")
    async with JwksServer([rsa_key]) as idp:
        check = _check(_keys(tmp_path), JwksKeys(idp.url, 300, 30))
        now = int(time.time())
        cases = {
            "unsigned": (jwt.encode(claims(run_id="r"), None, algorithm="none"), "unsigned-token"),
            "HS512": (mint(KEY * 2, claims(run_id="r"), alg="HS512"), "wrong-algorithm"),
            "confusion": (_hs256_by_hand(rsa_key.public_pem(), {"alg": "HS256", "typ": "JWT", "kid": rsa_key.kid},
                                         claims(run_id="r")), "wrong-algorithm"),
            "RS256 with an HMAC kid": (mint(rsa_key, claims(run_id="r"), kid="2026-01"), "wrong-algorithm"),
            "expired": (mint(KEY, claims(run_id="r", exp=now - 3600)), "expired-token"),
            "expired by the IdP": (mint(rsa_key, claims(run_id="r", exp=now - 3600)), "expired-token"),
            "not yet valid": (mint(KEY, claims(run_id="r", nbf=now + 3600)), "premature-token"),
            "issued in the future": (mint(rsa_key, claims(run_id="r", iat=now + 3600)), "premature-token"),
            "another audience": (mint(rsa_key, claims(run_id="r", aud="another-app")), "wrong-audience"),
            "no audience": (mint(KEY, claims(run_id="r", aud=None)), "wrong-audience"),
            "another issuer": (mint(rsa_key, claims(run_id="r", iss="https://evil.example")), "wrong-issuer"),
            "no issuer": (mint(KEY, claims(run_id="r", iss=None)), "wrong-issuer"),
            "unknown kid": (mint(KEY, claims(run_id="r"), kid="nobody"), "unknown-key"),
            "another key": (mint(SigningKey("idp-rsa", "RS256"), claims(run_id="r")), "bad-token"),
            "no expiry": (mint(KEY, claims(run_id="r", exp=None)), "bad-token"),
            "no grant": (mint(KEY, claims(sub="user")), "bad-token"),
            "two grants": (mint(KEY, claims(run_id="r", thread_id="t")), "bad-token"),
            "empty grant": (mint(KEY, claims(run_id="")), "bad-token"),
            "garbage": ("not-a-token", "bad-token"),
        }
        got = {label: await _refusal(check, token) for label, (token, _) in cases.items()}
        assert got == {label: (401, code) for label, (_, code) in cases.items()}
        assert await check.verify(mint(rsa_key, claims(run_id="r"))) == Grant("run", "r")
        await check.close()


async def test_jose_tokens_under_node_are_accepted_and_its_bad_ones_refused(tmp_path: Path) -> None:
    rsa_key, ec_key = SigningKey("idp-rsa", "RS256"), SigningKey("idp-ec", "ES256")
    jobs = [
        {"label": "HS256", "alg": "HS256", "secret": DIR_KEY.decode(), "kid": "2026-01",
         "claims": claims(thread_id="t-9")},
        {"label": "HS256, no kid", "alg": "HS256", "secret": KEY.decode(), "claims": claims(run_id="r-1")},
        {"label": "RS256", "alg": "RS256", "jwk": rsa_key.private_jwk(), "kid": rsa_key.kid,
         "claims": claims(run_id="r-2")},
        {"label": "ES256", "alg": "ES256", "jwk": ec_key.private_jwk(), "kid": ec_key.kid,
         "claims": claims(run_id="r-3")},
        {"label": "unsigned", "alg": "none", "claims": claims(run_id="r-1")},
        {"label": "confusion", "alg": "HS256", "secret": rsa_key.public_pem().decode(), "kid": rsa_key.kid,
         "claims": claims(run_id="r-1")},
        {"label": "expired", "alg": "ES256", "jwk": ec_key.private_jwk(), "kid": ec_key.kid,
         "claims": claims(run_id="r-3", exp=int(time.time()) - 60)},
    ]  # fmt: skip
    tokens = await node_tokens(tmp_path, jobs)
    async with JwksServer([rsa_key, ec_key]) as idp:
        check = _check(_keys(tmp_path), JwksKeys(idp.url, 300, 30))
        assert [await check.verify(tokens[label]) for label in ("HS256", "HS256, no kid", "RS256", "ES256")] == [
            Grant("thread", "t-9"), Grant("run", "r-1"), Grant("run", "r-2"), Grant("run", "r-3")]
        assert {label: (await _refusal(check, tokens[label]))[1] for label in ("unsigned", "confusion", "expired")} \
            == {"unsigned": "unsigned-token", "confusion": "wrong-algorithm", "expired": "expired-token"}  # fmt: skip
        assert idp.fetches == 1
        await check.close()


async def test_a_new_kid_at_the_jwks_url_is_fetched_once_however_many_tokens_name_unknown_kids() -> None:
    first, second = SigningKey("k1", "RS256"), SigningKey("k2", "ES256")
    symmetric = {"kty": "oct", "k": base64.urlsafe_b64encode(KEY).decode(), "kid": "sym"}  # never a signing key
    async with JwksServer([first], extra=[symmetric]) as idp:
        check = _check(None, JwksKeys(idp.url, 300, 2))
        bogus = [mint(first, claims(run_id="r"), kid=f"bogus-{i}") for i in range(50)]
        refused = await asyncio.gather(*(_refusal(check, token) for token in bogus))
        assert set(refused) == {(401, "unknown-key")} and idp.fetches == 1  # one fetch for the whole flood
        assert await _refusal(check, mint(KEY, claims(run_id="r"), kid="sym")) == (401, "unknown-key")

        idp.keys.append(second)  # rotation: the provider publishes a new key
        token = mint(second, claims(run_id="r-2"))
        assert await _refusal(check, token) == (401, "unknown-key") and idp.fetches == 1  # within the interval
        await asyncio.sleep(2.1)
        assert await check.verify(token) == Grant("run", "r-2") and idp.fetches == 2
        assert await check.verify(mint(first, claims(run_id="r-1"))) == Grant("run", "r-1")
        assert idp.fetches == 2

        idp.down = True  # keys read before stay in use while the provider fails
        await asyncio.sleep(2.1)
        assert await _refusal(check, mint(first, claims(run_id="r"), kid="bogus")) == (401, "unknown-key")
        assert idp.fetches == 3 and await check.verify(token) == Grant("run", "r-2")
        await check.close()


async def test_an_unreachable_identity_provider_is_a_503_not_a_refused_token() -> None:
    async with JwksServer([SigningKey("k1", "RS256")], down=True) as idp:
        check = _check(None, JwksKeys(idp.url, 300, 30))
        with pytest.raises(GatewayError) as unavailable:
            await check.verify(mint(idp.keys[0], claims(run_id="r")))
        assert (unavailable.value.status, unavailable.value.code) == (503, "keys-unavailable")
        await check.close()


async def test_a_request_that_goes_away_does_not_cut_the_fetch_of_the_keys_short() -> None:
    async with JwksServer([SigningKey("k1", "ES256")], delay_s=0.5) as idp:
        check = _check(None, JwksKeys(idp.url, 300, 60))
        token = mint(idp.keys[0], claims(run_id="r"))
        gone = asyncio.create_task(check.verify(token))
        await asyncio.sleep(0.1)
        gone.cancel()  # as aiohttp cancels the handler of a client that disconnected
        assert await check.verify(token) == Grant("run", "r") and idp.fetches == 1
        await check.close()


async def test_a_key_file_added_to_the_directory_is_read_without_a_restart_and_a_removed_one_goes(
    tmp_path: Path,
) -> None:
    check = _check(_keys(tmp_path, max_age_s=0.5, min_refresh_s=0))
    new_key = b"n" * 32
    token = mint(new_key, claims(run_id="r"), kid="2026-02")
    assert await _refusal(check, token) == (401, "unknown-key")
    (tmp_path / "keys" / "2026-02").write_bytes(new_key)
    assert await check.verify(token) == Grant("run", "r")
    (tmp_path / "keys" / "2026-01").unlink()
    old = mint(DIR_KEY, claims(run_id="r"), kid="2026-01")
    await asyncio.sleep(0.6)
    assert await _refusal(check, old) == (401, "unknown-key")
    (tmp_path / "keys" / "2026-03").write_bytes(b"too short")  # a re-read meeting it fails: the keys read before stay
    assert await _refusal(check, mint(b"t" * 32, claims(run_id="r"), kid="2026-03")) == (401, "unknown-key")
    assert await check.verify(token) == Grant("run", "r")


async def test_the_token_command_prints_a_jwt_the_gateway_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check = _check(_keys(tmp_path))
    assert main_gateway(["token", "--auth-key-file", str(tmp_path / "keys" / "2026-01"), "--kid", "2026-01",
                         "--thread-id", "t-1", "--ttl", "60", "--audience", AUDIENCE, "--issuer", ISSUER]) == 0
    token = capsys.readouterr().out.strip()
    assert jwt.get_unverified_header(token)["kid"] == "2026-01"
    assert await check.verify(token) == Grant("thread", "t-1")
    assert main_gateway(["token", "--auth-key-file", str(tmp_path / "gateway.key"), "--run-id", "r"]) == 0
    assert await _refusal(check, capsys.readouterr().out.strip()) == (401, "wrong-issuer")  # neither iss nor aud
    assert main_gateway(["token", "--auth-key-file", str(tmp_path / "keys" / ".hidden"), "--run-id", "r"]) == 2
    assert "at least 32" in capsys.readouterr().err


async def test_the_check_reads_every_key_source_and_names_what_fails(tmp_path: Path) -> None:
    _keys(tmp_path)
    async with JwksServer([SigningKey("k1", "RS256"), SigningKey("k2", "ES256")]) as idp:
        rows = await check_keys(str(tmp_path / "gateway.key"), str(tmp_path / "keys"), idp.url)
        assert rows == [("auth_key_file and auth_keys_dir: HMAC keys", True, "kids 2026-01, gateway.key"),
                        ("auth_jwks_url: signing keys", True, "k1 (RS256), k2 (ES256)")]  # fmt: skip
        idp.down = True
        [(what, ok, detail)] = await check_keys(None, None, idp.url)
        assert (what, ok) == ("auth_jwks_url: signing keys", False) and "HTTP 503" in detail, detail


def test_gateway_check_has_a_row_per_key_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "2026-01").write_bytes(b"short")
    status = main_gateway(["check", "--bootstrap-servers", "127.0.0.1:1", "--display-topic", "agui.display",
                           "--auth-keys-dir", str(tmp_path / "keys"), "--timeout-ms", "1000", "--json"])
    rows = {row["check"]: row for row in json.loads(capsys.readouterr().out)["checks"]}
    assert status == 1 and rows["connect"]["status"] == "fail"
    assert rows["auth_keys_dir: HMAC keys"]["status"] == "fail"
    assert "at least 32" in rows["auth_keys_dir: HMAC keys"]["detail"]


def test_keys_that_cannot_work_stop_the_gateway_at_start(tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"k" * 31)
    with pytest.raises(ConfigError, match="at least 32"):
        HmacKeys(str(tmp_path / "short"), None, 300, 30)
    with pytest.raises(ConfigError, match="cannot be listed"):
        HmacKeys(None, str(tmp_path / "missing"), 300, 30)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no key file"):
        HmacKeys(None, str(tmp_path / "empty"), 300, 30)


@pytest.mark.parametrize(("settings", "phrase"), [
    ({}, "auth_key_file, auth_keys_dir or auth_jwks_url is required"),
    ({"auth_jwks_url": "https://idp.example/jwks", "auth_issuer": ISSUER}, "needs auth_audience and auth_issuer"),
    ({"auth_jwks_url": "http://idp.example/jwks", "auth_issuer": ISSUER, "auth_audience": AUDIENCE}, "https"),
])  # fmt: skip
def test_settings_that_would_accept_anyone_s_tokens_are_refused(settings: dict[str, str], phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):  # pydantic's ValidationError carrying the ConfigError
        GatewaySettings(display_topic="agui.display", **settings)  # type: ignore[arg-type]


def test_settings_of_an_identity_provider_on_loopback_are_accepted() -> None:
    settings = GatewaySettings(display_topic="agui.display", auth_jwks_url="http://127.0.0.1:9/jwks",
                               auth_issuer=ISSUER, auth_audience=AUDIENCE)  # fmt: skip
    assert isinstance(TokenCheck.from_settings(settings), TokenCheck)
