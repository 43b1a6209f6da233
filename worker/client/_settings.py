"""How a client reaches and authenticates to the brokers: the settings every command shares, read from the same
`WORKER_*` variables."""

from __future__ import annotations

import os
import urllib.parse
from typing import Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from worker.errors import ConfigError

__all__ = ["SASL_MECHANISMS", "ConnectionSettings"]

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""The SASL mechanisms the worker can serve."""
_TLS_FIELDS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_password_file")
_FILE_FIELDS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password_file", "sasl_password_file",
                "oauth_client_secret_file")


def _one_of(settings: ConnectionSettings, name: str) -> bool:
    """Whether the secret `name` is given (by its environment variable or its file); ConfigError for both."""
    value, path = getattr(settings, name), getattr(settings, f"{name}_file")
    if value is not None and path is not None:
        raise ConfigError(f"{name} is given twice, in WORKER_{name.upper()} and by {name}_file: keep one")
    return value is not None or path is not None


class ConnectionSettings(BaseSettings):
    """How a client reaches and authenticates to the brokers: the settings `run` and `gateway` share, read from the
    same `WORKER_*` variables. A secret is never a flag: it comes from a file a `*_file` setting names, or from
    its environment variable (a Kubernetes Secret); `secret()` reads it when a client is made."""

    model_config = SettingsConfigDict(env_prefix="WORKER_", extra="forbid", frozen=True)

    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, comma-separated.")
    client_id: str = Field("harness-agui-worker", description="Client id prefix shown in broker logs and quotas.")

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="Client security protocol."
    )
    sasl_mechanism: str | None = Field(
        None, description=f"SASL mechanism (required with SASL_*): {', '.join(SASL_MECHANISMS)}."
    )
    sasl_username: str | None = Field(None, description="SASL username (PLAIN and SCRAM).")
    sasl_password: SecretStr | None = Field(
        None, description="SASL password; environment only, never a flag (or use sasl_password_file)."
    )
    sasl_password_file: str | None = Field(None, description="File holding the SASL password (PLAIN and SCRAM).")
    oauth_token_endpoint: str | None = Field(None, description=(
        "OAUTHBEARER: the OIDC token endpoint the worker gets access tokens from (client-credentials grant); https, "
        "or http on a loopback address."
    ))
    oauth_client_id: str | None = Field(None, description="OAUTHBEARER: the OIDC client id.")
    oauth_client_secret: SecretStr | None = Field(None, description=(
        "OAUTHBEARER: the OIDC client secret; environment only, never a flag (or use oauth_client_secret_file)."
    ))
    oauth_client_secret_file: str | None = Field(
        None, description="OAUTHBEARER: file holding the OIDC client secret, read again at every token request."
    )
    oauth_scope: str | None = Field(None, description="OAUTHBEARER: the scope to request, if the provider needs one.")
    oauth_timeout_ms: int = Field(
        10_000, ge=100, le=120_000, description="OAUTHBEARER: longest wait for the token endpoint's answer."
    )
    ssl_cafile: str | None = Field(None, description="CA bundle path for SSL.")
    ssl_certfile: str | None = Field(None, description="Client certificate path for mutual TLS.")
    ssl_keyfile: str | None = Field(None, description="Client key path for mutual TLS.")
    ssl_password: SecretStr | None = Field(
        None, description="Password of the client key; environment only, never a flag (or use ssl_password_file)."
    )
    ssl_password_file: str | None = Field(None, description="File holding the password of the client key.")
    ssl_check_hostname: bool = Field(True, description="Verify the broker's host name against its certificate.")

    @field_validator("sasl_mechanism")
    @classmethod
    def _served_mechanism(cls, value: str | None) -> str | None:
        if value is None or value.upper() in SASL_MECHANISMS:
            return None if value is None else value.upper()
        why = " (Kerberos is not built into this worker)" if value.upper() == "GSSAPI" else ""
        raise ConfigError(
            f"sasl_mechanism {value!r} cannot be served{why}: use one of {', '.join(SASL_MECHANISMS)}"
        )

    @model_validator(mode="after")
    def _security_consistent(self) -> Self:
        sasl = self.security_protocol.startswith("SASL")
        tls = self.security_protocol in ("SSL", "SASL_SSL")
        if sasl and self.sasl_mechanism is None:
            raise ConfigError(f"security_protocol={self.security_protocol} needs sasl_mechanism")
        if not sasl and self.sasl_mechanism is not None:
            raise ConfigError(
                f"sasl_mechanism={self.sasl_mechanism} needs security_protocol SASL_SSL (or SASL_PLAINTEXT), not "
                f"{self.security_protocol}"
            )
        given = {name for name in _TLS_FIELDS if getattr(self, name) is not None}
        if given and not tls:
            raise ConfigError(
                f"{', '.join(sorted(given))} set, but security_protocol={self.security_protocol} uses no TLS: use "
                "SSL or SASL_SSL"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigError("ssl_keyfile needs ssl_certfile (the client certificate it belongs to)")
        _one_of(self, "ssl_password")
        if self.sasl_mechanism == "OAUTHBEARER":
            self._oauth_consistent()
        elif self.sasl_mechanism is not None:
            if not self.sasl_username:
                raise ConfigError(f"sasl_mechanism={self.sasl_mechanism} needs sasl_username")
            if not _one_of(self, "sasl_password"):
                raise ConfigError(
                    f"sasl_mechanism={self.sasl_mechanism} needs a password: set sasl_password_file, or "
                    "WORKER_SASL_PASSWORD in the environment"
                )
        return self

    def check_files(self) -> None:
        """ConfigError naming the first file setting whose file this process cannot read (checked at start)."""
        for name in _FILE_FIELDS:
            path = getattr(self, name)
            if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
                raise ConfigError(f"{name} {path!r} is not a readable file")

    def _oauth_consistent(self) -> None:
        unused = [name for name in ("sasl_username", "sasl_password", "sasl_password_file")
                  if getattr(self, name) is not None]  # fmt: skip
        if unused:
            raise ConfigError(f"{', '.join(unused)} set, but OAUTHBEARER takes the oauth_* settings instead")
        if not self.oauth_token_endpoint or not self.oauth_client_id:
            raise ConfigError("sasl_mechanism=OAUTHBEARER needs oauth_token_endpoint and oauth_client_id")
        if not _one_of(self, "oauth_client_secret"):
            raise ConfigError(
                "sasl_mechanism=OAUTHBEARER needs a client secret: set oauth_client_secret_file, or "
                "WORKER_OAUTH_CLIENT_SECRET in the environment"
            )
        url = urllib.parse.urlsplit(self.oauth_token_endpoint)
        loopback = url.hostname in ("localhost", "::1") or (url.hostname or "").startswith("127.")
        if url.scheme != "https" and not (url.scheme == "http" and loopback):
            raise ConfigError(
                f"oauth_token_endpoint {self.oauth_token_endpoint!r} must be an https URL (http only on a loopback "
                "address): the client secret travels in the request"
            )

    def secret(self, name: Literal["sasl_password", "ssl_password", "oauth_client_secret"]) -> str | None:
        """The secret `name` as of now: its `<name>_file`'s first line, else its environment value, else None."""
        path = getattr(self, f"{name}_file")
        if path is not None:
            try:
                with open(path, encoding="utf-8") as file:
                    return file.readline().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(f"{name}_file {path!r} cannot be read: {exc.strerror}") from None
        value: SecretStr | None = getattr(self, name)
        return None if value is None else value.get_secret_value()
