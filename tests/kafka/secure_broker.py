"""The secured session broker as tests use it: principals with their credentials, ACLs granted and revoked with
Kafka's own `kafka-acls` class, topics created by the admin, and every secret handed out (so a test can search the
logs for them)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.kafka_cluster import KafkaCluster, create_topic_on
from devtools.kafka_security import BrokerSecurity, Issued, new_secret
from devtools.kafka_tools import run_tool
from tests.kafka.oidc_issuer import OidcIssuer
from tests.kafka.support import WorkerProcess
from worker.errors import KafkaWorkerError

__all__ = ["Principal", "SecureKafka"]


@dataclass(frozen=True)
class Principal:
    """A client identity on the secured broker and how the worker authenticates as it: `mechanism` is a SASL
    mechanism, or `MTLS` for a client certificate (whose CN is the name)."""

    name: str
    mechanism: str
    secret: str = ""  # the password, or the OIDC client secret
    tls: Issued | None = None

    @property
    def acl_name(self) -> str:
        """The principal as kafka-acls names it."""
        return f"User:{self.name}"


@dataclass
class SecureKafka:
    """One secured cluster (SASL_SSL, mutual TLS, StandardAuthorizer) with its OIDC issuer."""

    cluster: KafkaCluster
    security: BrokerSecurity
    issuer: OidcIssuer
    workdir: Path
    secrets: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.admin_config = self.security.java_client_properties(self.workdir / "admin.properties")
        self.secrets.add(self.security.admin_password)
        self.secrets.update(self.security.plain_users.values())

    @property
    def bootstrap_servers(self) -> str:
        """The SASL_SSL listeners."""
        return self.cluster.bootstrap_servers

    @property
    def tls_bootstrap_servers(self) -> str:
        """The mutual-TLS listeners."""
        return self.cluster.tls_bootstrap_servers

    @property
    def oauth_bootstrap_servers(self) -> str:
        """The OAUTHBEARER listeners."""
        return self.cluster.oauth_bootstrap_servers

    @property
    def ca_file(self) -> Path:
        return self.security.ca.ca_file

    def admin_options(self) -> dict[str, Any]:
        """aiokafka arguments beside bootstrap_servers that act as the admin (a super user)."""
        return self.security.admin_options()

    # ---- principals -------------------------------------------------------------------------------------
    def scram_user(self, name: str, mechanism: str = "SCRAM-SHA-512") -> Principal:
        """Create a SCRAM credential of `mechanism` for `name` with `kafka-configs`, which reads the password from a
        file (a request may set one mechanism of a user)."""
        password = new_secret()
        self.secrets.add(password)
        config = self.workdir / f"scram-{name}.properties"
        config.write_text(f"{mechanism}=password={password}\n")
        config.chmod(0o600)
        try:
            self.tool("configs", "--alter", "--entity-type", "users", "--entity-name", name,
                      "--add-config-file", str(config))  # fmt: skip
        finally:
            config.unlink()
        return Principal(name, mechanism, password)

    def plain_user(self, name: str) -> Principal:
        """A PLAIN user the brokers were started with."""
        return Principal(name, "PLAIN", self.security.plain_users[name])

    def oidc_client(self, name: str) -> Principal:
        """An OIDC client of the issuer; the brokers name it by the token's subject, its client id."""
        secret = new_secret()
        self.secrets.add(secret)
        self.issuer.clients[name] = secret
        return Principal(name, "OAUTHBEARER", secret)

    def tls_client(self, name: str) -> Principal:
        """A client certificate with CN=`name` from the cluster's CA."""
        return Principal(name, "MTLS", tls=self.security.ca.issue(name))

    # ---- the worker's connection --------------------------------------------------------------------------
    def worker_connection(self, principal: Principal, files: Path) -> tuple[str, list[str]]:
        """The bootstrap servers and the flags that connect `python -m worker run` as `principal`: a secret goes
        in a file under `files` that a flag names, never on the command line."""
        files.mkdir(parents=True, exist_ok=True)
        if principal.mechanism == "MTLS":
            assert principal.tls is not None
            return self.tls_bootstrap_servers, [
                "--security-protocol", "SSL", "--ssl-cafile", str(self.ca_file),
                "--ssl-certfile", str(principal.tls.cert), "--ssl-keyfile", str(principal.tls.key),
            ]  # fmt: skip
        secret = files / f"{principal.name}.secret"
        secret.write_text(principal.secret + "\n")
        secret.chmod(0o600)
        oauth = principal.mechanism == "OAUTHBEARER"
        flags = ["--security-protocol", "SASL_SSL", "--ssl-cafile", str(self.ca_file),
                 "--sasl-mechanism", principal.mechanism]  # fmt: skip
        if oauth:
            flags += ["--oauth-token-endpoint", self.issuer.token_url, "--oauth-client-id", principal.name,
                      "--oauth-client-secret-file", str(secret), "--oauth-scope", "kafka"]  # fmt: skip
        else:
            flags += ["--sasl-username", principal.name, "--sasl-password-file", str(secret)]
        return (self.oauth_bootstrap_servers if oauth else self.bootstrap_servers), flags

    def worker(
        self, log_dir: Path, name: str, principal: Principal, source: str, output: str, dlq: str, group: str,
        *extra: str, metrics_port: int = 0,
    ) -> WorkerProcess:  # fmt: skip
        """A worker process connected as `principal`; its command line is kept beside its log (`<name>.argv`), so
        the search for secrets covers both."""
        bootstrap, flags = self.worker_connection(principal, log_dir / "secrets")
        process = WorkerProcess(log_dir, name, bootstrap, source, output, dlq, group, *flags, *extra,
                                metrics_port=metrics_port)  # fmt: skip
        (log_dir / f"{name}.argv").write_text("\0".join(process.args))
        return process

    def leaked(self, directory: Path) -> list[str]:
        """`file: secret` for every secret handed out that a file under `directory` (not a secrets file) holds."""
        found = []
        for path in sorted(directory.rglob("*")):
            if path.is_file() and path.parent.name != "secrets":
                text = path.read_text(errors="replace")
                found += [f"{path.name}: {secret[:6]}..." for secret in self.secrets if secret in text]
        return found

    # ---- topics and ACLs --------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        create_topic_on(self.bootstrap_servers, name, partitions, 1, config, client=self.admin_options())
        return name

    def tool(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a Kafka tool as the admin against the SASL_SSL listener; KafkaWorkerError when it fails."""
        done = run_tool(tool, ["--bootstrap-server", self.bootstrap_servers, "--command-config",
                               str(self.admin_config), *args])  # fmt: skip
        if done.returncode != 0:
            raise KafkaWorkerError(f"kafka {tool} {' '.join(args)} failed ({done.returncode}): "
                                   f"{(done.stdout + done.stderr).strip()[-2000:]}")  # fmt: skip
        return done

    def grant(self, principal: Principal, *resource_and_operations: str) -> None:
        """`kafka-acls --add --allow-principal <p>` with the given `--operation`/resource arguments."""
        self.tool("acls", "--add", "--allow-principal", principal.acl_name, *resource_and_operations)

    def revoke(self, principal: Principal, *resource_and_operations: str) -> None:
        """`kafka-acls --remove --force --allow-principal <p>` with the given arguments."""
        self.tool("acls", "--remove", "--force", "--allow-principal", principal.acl_name, *resource_and_operations)

    def grant_worker(self, principal: Principal, *, source: str, output: str, dlq: str, group: str,
                     prefix: str, changelog: str | None = None, display: str | None = None,
                     index: str | None = None, describe_configs: bool = True) -> None:
        """Every right the worker needs, as docs/access-control.md lists them, in one kafka-acls call per
        resource kind; without DescribeConfigs on the topics written when `describe_configs` is false."""
        topics: Sequence[str] = [t for t in (output, dlq, changelog, display, index) if t]
        self.grant(principal, "--operation", "Read", "--operation", "Describe", "--topic", source)
        written = [arg for topic in topics for arg in ("--topic", topic)]
        configs = ["--operation", "DescribeConfigs"] if describe_configs else []
        self.grant(principal, "--operation", "Write", "--operation", "Describe", *configs, *written)
        if changelog or display or index:
            created = [arg for topic in (changelog, display, index) if topic for arg in ("--topic", topic)]
            self.grant(principal, "--operation", "Create", *created)
        if changelog:
            self.grant(principal, "--operation", "Read", "--topic", changelog)
        self.grant(principal, "--operation", "Read", "--operation", "Describe", "--group", group)
        self.grant(principal, "--operation", "Write", "--operation", "Describe", "--transactional-id",
                   f"{prefix}:", "--resource-pattern-type", "prefixed")  # fmt: skip
        self.grant(principal, "--operation", "DescribeConfigs", "--cluster")
