"""Why the brokers refused a connection before any request: the TLS or SASL handshake's failure, as a cause an
operator can act on (the label of `harness_agui_authentication_failures_total`)."""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from aiokafka.errors import (
    AuthenticationFailedError,
    IllegalSaslStateError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from worker.errors import TokenError

__all__ = ["CAUSES", "Refusal", "refusal_in"]

CAUSES: Final = ("authentication", "mechanism", "tls-untrusted", "tls-hostname", "tls-client-certificate", "tls",
                 "token")  # fmt: skip
"""Every cause a refusal can have (the label values of `harness_agui_authentication_failures_total` and of the
gateway's)."""

_HOSTNAME_MISMATCH: Final = frozenset({62, 64})  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
_EXPIRED: Final = 10  # X509_V_ERR_CERT_HAS_EXPIRED
_CLIENT_CERTIFICATE_ALERTS: Final = frozenset({
    "TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_BAD_CERTIFICATE", "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "SSLV3_ALERT_CERTIFICATE_EXPIRED", "TLSV1_ALERT_ACCESS_DENIED",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Refusal:
    """A handshake failure: its `cause` (one of CAUSES) and what it means and what to check, in a few words."""

    cause: str
    meaning: str


def _refusal(exc: BaseException) -> Refusal | None:
    if isinstance(exc, SaslAuthenticationFailed | AuthenticationFailedError):
        return Refusal("authentication", "authentication failed: the brokers refused the user name and password "
                       "(or token); check the credentials in the password file or Secret")  # fmt: skip
    if isinstance(exc, UnsupportedSaslMechanismError | IllegalSaslStateError):
        return Refusal("mechanism", "the brokers do not offer this SASL mechanism on this listener; set "
                       "--sasl-mechanism to one they enable, or connect to the listener that offers it")  # fmt: skip
    if isinstance(exc, TokenError):
        return Refusal("token", "no OAUTHBEARER token: check --oauth-token-endpoint, the client id and secret")
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code in _HOSTNAME_MISMATCH:
            return Refusal("tls-hostname", "host name mismatch: the broker's certificate does not name the address "
                           "connected to; use a name its certificate lists in --bootstrap-servers")  # fmt: skip
        if exc.verify_code == _EXPIRED:
            return Refusal("tls-untrusted", "the broker's certificate has expired")
        return Refusal("tls-untrusted", "certificate not trusted: the broker's certificate is not signed by a CA in "
                       "--ssl-cafile; point it at the CA that signed the brokers' certificates")  # fmt: skip
    if isinstance(exc, ssl.SSLError):
        if exc.reason in _CLIENT_CERTIFICATE_ALERTS:
            return Refusal("tls-client-certificate", "the broker refused the client certificate (missing, or not "
                           "signed by a CA it trusts): check --ssl-certfile and --ssl-keyfile")  # fmt: skip
        return Refusal("tls", "the TLS handshake failed (is this a TLS listener, and --security-protocol right?)")
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def refusal_in(errors: Iterable[BaseException]) -> Refusal | None:
    """The first handshake refusal among `errors` and what caused them; None when none is one (an unreachable
    broker, a timeout)."""
    for error in errors:
        for exc in _chain(error):
            found = _refusal(exc)
            if found is not None:
                return found
    return None
