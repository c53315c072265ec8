"""TLS through the ssl module: a self-signed certificate made with the openssl command line, naming the
server as quorumlog certificates do (a client checks that the certificate names the id HELLO gives)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from quorumlog.net import ConnectionClosedError, connect, serve
from quorumlog.net.connection import Connection
from quorumlog.net.frames import Frame
from quorumlog.net.ops import Op

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=server",
                    "-addext", "subjectAltName=IP:127.0.0.1,URI:quorumlog:server"],
                   check=True, capture_output=True, timeout=60)
    return crt, key


def echo(conn: Connection, f: Frame) -> bytes:
    return bytes(f.body)


def test_tls_round_trip_and_plaintext_client_refused(cert: tuple[Path, Path]) -> None:
    crt, key = cert
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(crt, key)
    client_ctx = ssl.create_default_context(cafile=str(crt))

    async def main() -> None:
        async with await serve("127.0.0.1", 0, echo, cluster="c", secret="k", ssl=server_ctx) as server:
            conn = await connect("127.0.0.1", server.port, cluster="c", secret="k", ssl=client_ctx)
            fs = [conn.send_request(Op.GET, b"x" * n, timeout=5) for n in range(0, 200_000, 20_000)]
            assert [len((await f).body) for f in fs] == list(range(0, 200_000, 20_000))
            conn.close()
            await conn.wait_closed()
            # A client that skips TLS does not get through the handshake.
            with pytest.raises((ConnectionClosedError, OSError)):
                await connect("127.0.0.1", server.port, cluster="c", secret="k", timeout=5)

    asyncio.run(asyncio.wait_for(main(), 20))
