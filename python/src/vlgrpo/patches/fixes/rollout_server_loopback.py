"""Patch ``rollout.server_loopback``: the vLLM replicas' OpenAI HTTP server listens on the loopback address only
(field case C01).

verl v0.8.0's ``vLLMHttpServer.run_server`` (``verl/workers/rollout/vllm_rollout/vllm_async_server.py``) serves vLLM's
whole OpenAI API (``build_app``: ``/v1/chat/completions``, ``/invocations``, ``/tokenize``, ...) without
authentication on ``self._server_address`` = ``ray.util.get_node_ip_address()`` and a random port
(``run_uvicorn(app, args, self._server_address)``, ``verl/workers/rollout/utils.py``: ``uvicorn.Config(host=...,
port=0)``); the images use host networking and vLLM 0.13.0 is inside CVE-2026-22778 and CVE-2026-34755 through video
inputs. Nothing in either recipe calls the replicas over HTTP: the agent loop and the fully-async client reach them
through Ray actor calls (``LLMServerClient.generate`` -> ``server.generate.remote``; the load balancer keys servers by
the address string only). HTTP callers exist only outside both recipes (verl's GenRM reward router, Prometheus
scraping, ``main_generation_server``); ``--api-key`` would not cover them either, since vLLM 0.13.0's key check skips
every path outside ``/v1`` (``/invocations`` runs chat completions). So the listener is bound to ``127.0.0.1`` (``::1``
for an IPv6 node address); the node address stays what verl reports and uses for its DP/torch.distributed ports.

Standard library at import (the registry imports this module at interpreter start).
"""

import sys

_SERVER = "verl.workers.rollout.vllm_rollout.vllm_async_server"

RECORD = {
    "id": "rollout.server_loopback",
    "title": "vLLM replicas serve an unauthenticated OpenAI API on the node IP: loopback only (C01)",
    "summary": (
        "every vLLM replica serves the whole OpenAI API (chat completions with video input: vLLM 0.13.0 is inside "
        "CVE-2026-22778 and CVE-2026-34755) without authentication on the node IP; nothing in either recipe calls it "
        "over HTTP (the agent loop uses Ray), so the HTTP listener is bound to the loopback address"
    ),
    "upstream": "field case C01 (no upstream fix); vLLM advisories CVE-2026-22778, GHSA-pq5c-rjhq-qp7p / CVE-2026-34755",
    "safety": "exposure: without it every vLLM replica serves an unauthenticated OpenAI API on the node IP",
    "applies_when": (
        "verl's vLLM server passes the node IP it got from ray.util.get_node_ip_address() as the uvicorn host "
        "(verl v0.8.0-0.9.1)"
    ),
    "targets": ((_SERVER, "run_uvicorn"),),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_run_uvicorn",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}

LOOPBACK_V4, LOOPBACK_V6 = "127.0.0.1", "::1"


def is_faulty(func: object, server_source: str | None = None) -> tuple[bool, str]:
    """``(faulty, reason)`` for the ``run_uvicorn`` bound in verl's vLLM server module: faulty when that module (its
    source in ``server_source``, else the imported module's) sets ``_server_address`` from
    ``get_node_ip_address()`` and passes ``self._server_address`` as the host argument of ``run_uvicorn``."""
    import ast
    import inspect

    if server_source is None:
        module = sys.modules.get(_SERVER)
        if module is None:
            return False, f"{_SERVER} is not imported"
        server_source = inspect.getsource(module)
    tree = ast.parse(server_source)
    node_ip = any(
        isinstance(n, ast.Assign)
        and any(getattr(t, "attr", None) == "_server_address" for t in n.targets)
        and "get_node_ip_address" in ast.unparse(n.value)
        for n in ast.walk(tree)
    )
    passes = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and getattr(n.func, "id", None) == "run_uvicorn"
        and len(n.args) >= 3
        and ast.unparse(n.args[2]) == "self._server_address"
    ]
    if node_ip and passes:
        return True, (
            f"vLLMHttpServer binds its OpenAI server (no API key) to the node IP from "
            f"get_node_ip_address() (line {passes[0].lineno}): reachable from any host on the network"
        )
    return False, "the vLLM server module does not bind its HTTP server to the node IP"


def loopback_for(address: str) -> str:
    """The loopback address of ``address``'s family: ``::1`` for an IPv6 address, else ``127.0.0.1``."""
    return LOOPBACK_V6 if ":" in (address or "").strip("[]") else LOOPBACK_V4


def make_run_uvicorn(original):
    """Wrap ``async run_uvicorn(app, server_args, server_address) -> (port, task)`` (verl v0.8.0
    ``verl/workers/rollout/utils.py``): the same server on the loopback address of the node address's family."""

    async def run_uvicorn(app, server_args, server_address, *args, **kwargs):
        return await original(app, server_args, loopback_for(server_address), *args, **kwargs)

    return run_uvicorn


make_run_uvicorn.__vlgrpo_code__ = make_run_uvicorn(None).__code__


def verify() -> None:
    """The wrapper hands the original the loopback host of the node address's family and returns its result; the
    detector flags verl v0.8.0's binding lines and not a server that passes a loopback literal. Raises
    ``AssertionError``."""
    import asyncio

    seen = []

    async def original(app, server_args, server_address):
        seen.append(server_address)
        return 1234, None

    wrapped = make_run_uvicorn(original)
    assert asyncio.run(wrapped("app", None, "192.0.2.2")) == (1234, None) and seen == ["127.0.0.1"]
    asyncio.run(wrapped("app", None, "fd00::5"))
    assert seen[-1] == "::1"
    faulty = (
        "class S:\n    def __init__(self):\n        self._server_address = ray.util.get_node_ip_address()\n"
        "    async def run_server(self, args):\n"
        "        self._server_port, _ = await run_uvicorn(app, args, self._server_address)\n"
    )
    assert is_faulty(None, faulty)[0]
    assert not is_faulty(
        None, faulty.replace("run_uvicorn(app, args, self._server_address)", "run_uvicorn(app, args, '127.0.0.1')")
    )[0]
