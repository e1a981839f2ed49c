"""bench/compare_serve.py's Ray Serve side: the model as a Serve deployment (``app``,
imported by Serve's controller as ``ray_serve_app:app``), and, run as a script, the
driver: it connects to the Ray instance the bench started (``--address``), deploys
the app with two replicas, and calls it through a DeploymentHandle open-loop at
``--rate`` per second, one JSON line per request in ``--out``, the same lines as
bench/bin/serve_model_frontend.py writes (``{"i", "t", "lat", "ok", "pid", "err"}``).

It takes commands on stdin, one JSON object a line: ``{"replicas": N}`` deploys the
app again with N replicas, as a config deploy (what ``serve deploy config.yaml``
sends), not ``serve.run``: ``serve.run`` gives the code a new version every call, so
changing only ``num_replicas`` through it replaces every replica, while a config
whose import path is unchanged is a lightweight update, the replicas added or removed
and the others left alone (Serve's documented way to scale by hand). ``{"status":
true}`` asks the Serve controller for the app's status (``serve.status()``), which
returns once a controller answers: after the controller is killed, once Ray has
restarted it. EOF on stdin ends the driver; the bench then stops the whole instance.

It says on stdout, as JSON lines: ``ready`` (the app RUNNING, the first request on
its way), ``applied`` (a config sent), ``status`` (the controller answered).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time

import torch
from ray import serve
from serve_model_worker import WIDTH, build_model

TIMEOUT = 10.0  # seconds a request may take before it counts as failed (mwrun's timeout)


@serve.deployment(
    # Logical CPUs only (Ray does not pin): mwrun reserves none for its replicas either,
    # and three replicas (a scale-up) must fit on a two-core node's two CPUs.
    ray_actor_options={"num_cpus": 0},
)
class Model:
    def __init__(self):
        self.model = build_model()

    def __call__(self, request: torch.Tensor) -> tuple[torch.Tensor, int]:
        with torch.no_grad():
            return self.model(request), os.getpid()


app = Model.bind()


def config(replicas: int):
    from ray.serve.schema import ServeDeploySchema

    return ServeDeploySchema.model_validate({
        "proxy_location": "Disabled",  # the client is a handle: no HTTP proxy to run
        "applications": [{
            "name": "bench", "import_path": "ray_serve_app:app", "route_prefix": None,
            "deployments": [{"name": "Model", "num_replicas": replicas}],
        }],
    })


def say(event: str, **fields) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


async def client(handle, rate: float, out) -> None:
    """Request i due at start + i / rate, sent then whatever came back before."""
    torch.manual_seed(1)
    request = torch.randn(1, WIDTH)  # the same input every time, as mwrun's frontend's
    start, wall = time.monotonic(), time.time()
    pending = set()
    made = 0
    while True:
        due = start + made / rate
        await asyncio.sleep(max(due - time.monotonic(), 0))
        task = asyncio.ensure_future(one(handle, request, made, due, wall + (due - start), out))
        pending.add(task)
        task.add_done_callback(pending.discard)  # held until done: not collected early
        made += 1


async def one(handle, request, number: int, due: float, at: float, out) -> None:
    response = handle.remote(request)

    async def answer():
        return await response

    try:
        _, pid = await asyncio.wait_for(answer(), TIMEOUT)
    except Exception as exc:  # any failure is the figure, said with its type
        response.cancel()
        out.write(json.dumps({"i": number, "t": at, "lat": time.monotonic() - due,
                              "ok": False, "pid": None,
                              "err": f"{type(exc).__name__}: {exc}"[:200]}) + "\n")
        return
    out.write(json.dumps({"i": number, "t": at, "lat": time.monotonic() - due, "ok": True,
                          "pid": pid, "err": None}) + "\n")


def main(args) -> None:
    import ray

    ray.init(address=args.address, log_to_driver=False, logging_level="WARNING",
             configure_logging=False)
    serve.start(proxy_location="Disabled")
    client_ = serve.context._get_global_client()  # what `serve deploy` talks to
    client_.deploy_apps(config(args.replicas), _blocking=True)
    handle = serve.get_app_handle("bench")
    loop = asyncio.new_event_loop()
    out = open(args.out, "a", buffering=1)  # noqa: SIM115  (open until os._exit)
    threading.Thread(target=loop.run_until_complete, args=(client(handle, args.rate, out),),
                     daemon=True).start()
    say("ready")
    for line in sys.stdin:
        command = json.loads(line)
        if "replicas" in command:
            client_.deploy_apps(config(command["replicas"]))
            say("applied", replicas=command["replicas"])
        if command.get("status"):  # the controller answers (after a kill: once restarted)
            serve.status()
            say("status")
    # The bench closed stdin: it is done with this instance and stops it whole. No
    # ray.shutdown(): with the GCS killed it would wait on it; the lines are written.
    out.flush()
    os._exit(0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="the GCS, host:port")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--out", required=True)
    main(parser.parse_args())
