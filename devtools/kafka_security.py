"""A secured loopback Kafka for tests: a throwaway CA, SASL_SSL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER checked
against a JWKS endpoint), mutual TLS, and `StandardAuthorizer` denying whatever no ACL allows.

Every node listens on four ports: SASL_SSL for clients (PLAIN and SCRAM), SASL_SSL with OAUTHBEARER alone (so a
client can meet a listener that lacks its mechanism), SSL with a required client certificate (the brokers' own
traffic and mutual-TLS clients, whose principal is their certificate's CN), and the controller's SSL port.
The principals `broker` (the nodes' certificate) and the admin user are super users; nobody else may do anything
until an ACL allows it. Certificates name `127.0.0.1` only (no DNS name), so a client that connects to
`localhost` sees a host name mismatch. Needs the `cryptography` package (a test dependency).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["MECHANISMS", "BrokerSecurity", "Issued", "ThrowawayCA", "new_secret"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL mechanisms the client listener offers; the OAUTHBEARER listener offers only that one."""

_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
_JWT_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator"
_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"  # Kafka 4 fetches only URLs listed here
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_BROKER = "broker"


def new_secret() -> str:
    """A fresh random password: distinctive enough that a search of the logs for it cannot hit by chance."""
    return f"pw-{secrets.token_urlsafe(18)}"


@dataclass(frozen=True)
class Issued:
    """One certificate issued by a `ThrowawayCA`: its PEM files (the key unencrypted, PKCS#8)."""

    name: str
    cert: Path
    key: Path
    bundle: Path  # key and certificate in one file, as Kafka's PEM keystore reads it


class ThrowawayCA:
    """A certificate authority made for one test session, in `directory`: `ca.pem`, and certificates it issues."""

    def __init__(self, directory: Path, name: str = "harness-agui-worker test CA") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._name = subject
        self._cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, addresses: tuple[str, ...] = ("127.0.0.1",)) -> Issued:
        """A certificate for CN=`name`, valid for TLS servers and clients at the IP `addresses` (no DNS names)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])).issuer_name(self._name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())  # fmt: skip
        issued = Issued(name, self.directory / f"{name}.crt.pem", self.directory / f"{name}.key.pem",
                        self.directory / f"{name}.pem")  # fmt: skip
        issued.cert.write_bytes(cert_pem)
        issued.key.write_bytes(key_pem)
        issued.bundle.write_bytes(key_pem + cert_pem)
        for path in (issued.key, issued.bundle):
            path.chmod(0o600)
        return issued


@dataclass
class BrokerSecurity:
    """The security of a test cluster: its CA and certificates, the admin's PLAIN password (the only credential in
    the brokers' own config; SCRAM users are added with Kafka's tools), and where JWTs are validated."""

    directory: Path
    jwks_url: str
    audience: str = "kafka"
    issuer: str = ""
    admin: str = "admin"
    admin_password: str = field(default_factory=new_secret)
    plain_users: dict[str, str] = field(default_factory=dict)  # PLAIN users beside the admin: name -> password
    ca: ThrowawayCA = field(init=False)
    broker_tls: Issued = field(init=False)

    def __post_init__(self) -> None:
        self.ca = ThrowawayCA(self.directory / "tls")
        self.broker_tls = self.ca.issue(_BROKER)

    @property
    def super_users(self) -> tuple[str, ...]:
        """Principals the authorizer lets do anything."""
        return (f"User:{_BROKER}", f"User:{self.admin}")

    def node_properties(self, *, port: int, controller_port: int, tls_port: int, oauth_port: int) -> dict[str, str]:
        """The server properties that secure one node (its listeners on the four ports)."""
        plain_users = {self.admin: self.admin_password, **self.plain_users}
        plain_jaas = " ".join(f'user_{name}="{password}"' for name, password in plain_users.items())
        props = {
            "listeners": f"SASL_SSL://127.0.0.1:{port},OAUTH://127.0.0.1:{oauth_port},MTLS://127.0.0.1:{tls_port},"
                         f"CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port},OAUTH://127.0.0.1:{oauth_port},"
                                    f"MTLS://127.0.0.1:{tls_port}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,OAUTH:SASL_SSL,MTLS:SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "MTLS",
            "controller.listener.names": "CONTROLLER",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.broker_tls.bundle),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.ca_file),
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.controller.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": f"{_PLAIN_MODULE} required {plain_jaas};",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": f"{_SCRAM_MODULE} required;",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{_SCRAM_MODULE} required;",
            "listener.name.oauth.oauthbearer.sasl.jaas.config": f"{_OAUTH_MODULE} required;",
            "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": _VALIDATOR,
            # Kafka 4.1's default validator class (DefaultJwtValidator, built without a key resolver) checks a
            # JWT's form and expiry but not its signature; BrokerJwtValidator verifies it against the JWKS.
            "sasl.oauthbearer.jwt.validator.class": _JWT_VALIDATOR,
            "sasl.oauthbearer.jwks.endpoint.url": self.jwks_url,
            "sasl.oauthbearer.expected.audience": self.audience,
            "authorizer.class.name": _AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(self.super_users),
        }
        if self.issuer:
            props["sasl.oauthbearer.expected.issuer"] = self.issuer
        return props

    def jvm_options(self) -> tuple[str, ...]:
        """System properties the brokers' JVMs need: the JWKS endpoint is a URL they may fetch."""
        return (f"-D{_ALLOWED_URLS}={self.jwks_url}",)

    def ssl_context(self, client: Issued | None = None) -> ssl.SSLContext:
        """A client TLS context trusting the CA (and presenting `client`'s certificate)."""
        context = ssl.create_default_context(cafile=str(self.ca.ca_file))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        return context

    def admin_options(self) -> dict[str, Any]:
        """aiokafka client arguments (beside bootstrap_servers) that connect as the admin super user."""
        return {"security_protocol": "SASL_SSL", "ssl_context": self.ssl_context(), "sasl_mechanism": "PLAIN",
                "sasl_plain_username": self.admin, "sasl_plain_password": self.admin_password}  # fmt: skip

    def java_client_properties(self, path: Path, extra: Mapping[str, str] | None = None) -> Path:
        """Write the admin's client config for Kafka's Java tools (`--command-config`) to `path`, readable only by
        its owner."""
        props = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": f'{_PLAIN_MODULE} required username="{self.admin}" password="{self.admin_password}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.ca_file),
            **(extra or {}),
        }
        path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
        path.chmod(0o600)
        return path
