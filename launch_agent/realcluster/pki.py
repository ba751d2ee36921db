"""The certificates and keys a control plane needs, made fresh at every start.

What kubeadm makes (`cmd/kubeadm/app/phases/certs/certlist.go`), cut to what a loopback cluster
uses: one CA; the API server's serving certificate for 127.0.0.1 and the `kubernetes` Service
names; client certificates whose subject is the identity RBAC sees (`CN` the user, `O` the
groups: `system:masters` for the admin, `system:kube-controller-manager` and
`system:kube-scheduler` for the components, whose bootstrap roles the API server creates); the
API server's client certificate for the kubelets' endpoints; serving certificates for webhooks
and the simulated kubelets; and the service-account signing key pair. Nothing outlives the
cluster's directory, and no key is reused between two starts.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# cert-controller's rotator regenerates certificates expiring within 90 days
# (`lookaheadInterval`), so a seeded one must outlive that.
LIFETIME = datetime.timedelta(days=365)
SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, *, secret: bool = False) -> Path:
    path.write_bytes(data)
    if secret:
        path.chmod(0o600)
    return path


@dataclass
class Authority:
    """A CA in `directory`: `ca.crt` / `ca.key`, and the certificates it signs beside them."""

    directory: Path
    cert: x509.Certificate
    key: rsa.RSAPrivateKey

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @classmethod
    def create(
        cls,
        directory: Path,
        name: str = "launch-agent cluster CA",
        ca_names: tuple[str, ...] = (),
    ) -> Authority:
        """`ca_names`: DNS names the CA certificate itself carries. cert-controller's rotator
        (Kueue's and training-operator's certificate management) keeps a CA only if it verifies
        for the rotator's CA name (`validCACert`), and reads its key only as PKCS #1 RSA
        (`x509.ParsePKCS1PrivateKey`), hence RSA here."""
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        )
        if ca_names:
            cert = cert.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in ca_names]), critical=False
            )
        signed = cert.sign(key, hashes.SHA256())
        _write(directory / "ca.crt", signed.public_bytes(serialization.Encoding.PEM))
        pkcs1 = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        _write(directory / "ca.key", pkcs1, secret=True)
        return cls(directory, signed, key)

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        groups: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> KeyPair:
        """A leaf certificate `name.crt` / `name.key`: a server's when it has names or
        addresses (usable as a client too), else a client's."""
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + LIFETIME)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        if dns or ips:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False).sign(
            self.key, hashes.SHA256()
        )
        return KeyPair(
            _write(self.directory / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            _write(self.directory / f"{name}.key", _pem_key(key), secret=True),
        )


@dataclass(frozen=True)
class ControlPlanePKI:
    ca: Path
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    kubelet_client: KeyPair
    front_proxy: KeyPair
    loopback_server: KeyPair
    sa_private: Path
    sa_public: Path


def create(
    directory: Path,
    service_ip: str,
    extra_names: tuple[str, ...] = (),
    ca_names: tuple[str, ...] = (),
) -> ControlPlanePKI:
    """Everything one control plane needs, written into `directory` (mode 0600 for keys).
    `extra_names`: more DNS names for the loopback serving certificate; `ca_names`: for the CA
    (see `Authority.create`)."""
    ca = Authority.create(directory, ca_names=ca_names)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_public = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return ControlPlanePKI(
        ca=ca.ca_file,
        apiserver=ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            dns=SERVICE_NAMES,
            ips=("127.0.0.1", service_ip),
        ),
        admin=ca.issue("admin", common_name="cluster-admin", groups=("system:masters",)),
        controller_manager=ca.issue(
            "controller-manager", common_name="system:kube-controller-manager"
        ),
        scheduler=ca.issue("scheduler", common_name="system:kube-scheduler"),
        kubelet_client=ca.issue(
            "apiserver-kubelet-client",
            common_name="kube-apiserver-kubelet-client",
            groups=("system:masters",),
        ),
        # The aggregation layer's client (kubeadm's front-proxy-client; its own CA there).
        front_proxy=ca.issue("front-proxy-client", common_name="front-proxy-client"),
        # Webhook servers and the simulated kubelets' endpoints: every one listens on loopback.
        loopback_server=ca.issue(
            "loopback-server",
            common_name="loopback",
            dns=("localhost", *extra_names),
            ips=("127.0.0.1",),
        ),
        sa_private=_write(directory / "sa.key", _pem_key(sa_key), secret=True),
        sa_public=_write(directory / "sa.pub", sa_public),
    )
