"""Field case C01 on verl v0.8.0's real ``vLLMHttpServer.run_server`` -> ``run_uvicorn`` (real uvicorn) with a
stand-in vLLM: ``AsyncEngineArgs``/``AsyncLLM``/``init_app_state`` do nothing, ``build_app`` returns a tiny ASGI app
that answers every request like an OpenAI server would (200, JSON). ``_server_address`` is what verl's
``__init__`` sets (``ray.util.get_node_ip_address()``). With the server up, the scenario connects to the address
and port verl reports (``get_server_address``) from (a) this host, (b) another host: the network namespace
``VLGRPO_TEST_NETNS`` (a veth peer; ``ip netns exec``), when given, and to the loopback address. Run by
test_rollout_server_loopback.py with the sitecustomize shim. Prints one JSON line."""

import asyncio
import json
import os
import subprocess
import sys
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder, vllm_distribution

PROBE = (
    "import socket, sys\n"
    "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)\n"
    "s.sendall(b'POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 2\\r\\n\\r\\n{}')\n"
    "print(s.recv(200).split(b'\\r\\n')[0].decode())\n"
)


class App:
    """Stand-in for vLLM's ``build_app(args)``: an ASGI app (with the ``state`` verl fills) answering anyone."""

    state = types.SimpleNamespace()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"object": "chat.completion"}'})


app = App()


def _vllm(mod):
    name = mod.__name__
    if name == "vllm":
        mod.__version__ = "0.13.0"
    if name == "vllm.usage.usage_lib":
        mod.UsageContext = types.SimpleNamespace(OPENAI_API_SERVER="openai_api_server")
    if name == "vllm.engine.arg_utils":

        class AsyncEngineArgs:
            enable_log_requests = disable_log_stats = False

            @classmethod
            def from_cli_args(cls, args):
                return cls()

            def create_engine_config(self, usage_context=None):
                return types.SimpleNamespace(parallel_config=types.SimpleNamespace())

        mod.AsyncEngineArgs = AsyncEngineArgs
    if name == "vllm.v1.engine.async_llm":

        class Engine:
            model_config = None

            async def reset_mm_cache(self):
                pass

            async def collective_rpc(self, **kwargs):
                pass

        class AsyncLLM:
            @staticmethod
            def from_vllm_config(vllm_config, usage_context=None):
                return Engine()

        mod.AsyncLLM = AsyncLLM
    if name == "vllm.entrypoints.openai.api_server":

        def build_app(args):
            return app

        async def init_app_state(engine_client, state, args):
            pass

        mod.build_app, mod.init_app_state = build_app, init_app_state


def probe(host, port, netns=None):
    cmd = [sys.executable, "-c", PROBE, host, str(port)]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if proc.returncode == 0:
        return proc.stdout.strip()
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return "refused" if "ConnectionRefused" in last else last


async def scenario(out):
    import ray
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    server = object.__new__(vLLMHttpServer)
    server._server_address = ray.util.get_node_ip_address().strip("[]")  # verl v0.8.0 __init__
    server._dp_master_port, server.replica_rank, server.node_rank = 0, 1, 0
    server.model_config = types.SimpleNamespace(tokenizer=[0] * 8)
    await server.run_server(types.SimpleNamespace())
    address, port = server.get_server_address()
    out.update(address=address, port=port)
    loop = asyncio.get_running_loop()
    out["from_this_host_to_node_ip"] = await loop.run_in_executor(None, probe, address, port)
    out["loopback"] = await loop.run_in_executor(None, probe, "127.0.0.1", port)
    netns = os.environ.get("VLGRPO_TEST_NETNS")
    if netns:
        out["from_other_host"] = await loop.run_in_executor(None, probe, address, port, netns)
    server._server_task.cancel()


def main():
    out = {}
    try:
        vllm_distribution(os.environ["VLGRPO_TEST_TMP"])
        sys.meta_path.append(
            StubFinder(("vllm", "zmq", "msgspec", "fastapi", "cachetools", "peft", "accelerate", "tensordict"), _vllm)
        )
        import vlgrpo.patches

        asyncio.run(scenario(out))
        rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
        out["status"] = rows["rollout.server_loopback"]["status"]
    except BaseException:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
