"""``drafter-operator emulate``: serve a vLLM or SGLang emulator from the engine's own command line.

    drafter-operator emulate vllm serve /models/kimi-k2.5 --port 8000 \\
        --speculative-config '{"method":"eagle3","model":"/models/kimi-k2.5-eagle3","num_speculative_tokens":5}'
    drafter-operator emulate python3 -m sglang.launch_server --model-path /models/kimi-k2.5 \\
        --enable-metrics --speculative-algorithm EAGLE3 --speculative-draft-model-path D ...

HTTP API (aiohttp), per engine:
- both: ``GET /health`` (200 when up, 503 while "loading" or when startup is set to fail),
  ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions`` (``stream: true`` gives
  SSE ``data: {...}`` chunks, one per engine step, then ``data: [DONE]``;
  ``stream_options.include_usage`` adds a usage chunk), ``GET /metrics`` (SGLang: only with
  ``--enable-metrics``);
- vLLM: ``GET /version``, ``POST /tokenize`` and ``POST /detokenize`` (``emulator/openai.py``);
- SGLang: ``GET /health_generate`` (a one-token generation: 503 while starting), ``/ready``,
  ``/model_info``, ``/server_info`` (``internal_states[0].avg_spec_accept_length``) and the older
  ``/get_model_info``, ``/get_server_info``; the native ``POST /generate`` (``emulator/native.py``) and
  ``POST``/``GET /flush_cache``. ``tokenizer_path`` in the info bodies is the shipped tokenizer's
  directory, which ``sglang.bench_serving`` loads when given no ``--tokenizer``;
- control (emulator only): ``POST /emulator/acceptance`` ``{"acceptance": 0.2}`` sets the running
  drafter's per-token acceptance; ``POST /emulator/metrics-fault`` ``{"mode": "hang"}`` makes ``/metrics``
  hang, answer late, dribble, answer garbage or an error, or drop the connection
  (``emulator/metrics_faults.py``); ``GET /emulator/state`` returns configuration, model prediction,
  lifetime counts and the metrics fault in force.

A replica that spans nodes (``--nnodes`` above 1, ``emulator/group.py``): node rank 0 also listens on the group's
meeting port and answers 503 on ``/health`` and the readiness paths until every other rank joined; a worker (vLLM
``--headless``, SGLang's node rank above 0) serves no API, joins its leader and stays connected.

Environment (see ``emulator/model.py``): ``DRAFTER_EMULATOR_HOST``, ``_STARTUP_SECONDS``,
``_FAIL_STARTUP``, ``_TIME_SCALE``, ``_SEED``, ``_PROFILE``, ``_ACCEPTANCE``, ``_DOWNLOAD_SECONDS``,
``_GROUP_JOIN_SECONDS``.
The names (never the values) of the other variables are logged and reported in ``/emulator/state``;
hub ids, ``HF_HUB_OFFLINE`` and the hub cache are handled as the engines do (``emulator/hub.py``).
Exit status: 0 after SIGTERM/SIGINT, 2 for a bad command line or environment, 1 when the port
cannot be bound or a hub id is offline and not cached (the engine's own error), and 1 when the replica's process
group breaks: a rank left (the leader names it), the leader left, or a worker never reached its leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from drafter_testbed.emulator.cmdline import (
    USAGE,
    CommandLineError,
    EngineConfig,
    parse_command_line,
)
from drafter_testbed.emulator.engine import ENGINE_VERSIONS, EmulatedEngine
from drafter_testbed.emulator.families import startup_problems
from drafter_testbed.emulator.group import GROUP_BROKEN_STATUS, GroupConfig, GroupRefused, Leader, join, stay
from drafter_testbed.emulator.exporters import SglangExporter
from drafter_testbed.emulator.hub import HubModelUnavailable, environment_names, resolve_models
from drafter_testbed.emulator.logged_request import LoggedRequest
from drafter_testbed.emulator.metrics_faults import MetricsFault
from drafter_testbed.emulator.model import Pacer, Settings
from drafter_testbed.emulator.native import NativeResponseBuilder, parse_generate
from drafter_testbed.emulator.openai import (
    SSE_DONE,
    RequestError,
    ResponseBuilder,
    detokenize,
    parse_request,
    sse,
    tokenize,
)
from drafter_testbed.emulator.tokenizer import TOKENIZER_DIR
from drafter_testbed.emulator.profiles import ProfileError, load_profile
from drafter_testbed.emulator.sglang_adaptive import disabled_warning
from drafter_operator.engines import sglang as sglang_engine
from drafter_operator.engines import vllm as vllm_engine


def _error(message: str, status: int, kind: str) -> web.Response:
    return web.json_response(RequestError(message, status, kind).body(), status=status)


class EmulatorApp:
    """The aiohttp routes of one emulated engine."""

    def __init__(self, engine: EmulatedEngine) -> None:
        self.engine = engine
        self.config: EngineConfig = engine.config
        self.created = int(time.time())
        self.metrics_fault = MetricsFault()
        #: Set (and replaced) whenever the metrics fault changes: a hanging /metrics request waits on it.
        self._fault_changed = asyncio.Event()

    def build(self) -> web.Application:
        app = web.Application()
        cfg = self.config
        routes = [
            web.get(vllm_engine.HEALTH_PATH, self.health),
            web.get(vllm_engine.MODELS_PATH, self.models),
            web.post(vllm_engine.COMPLETIONS_PATH, self.completions),
            web.post(vllm_engine.CHAT_COMPLETIONS_PATH, self.chat_completions),
            web.post("/emulator/acceptance", self.set_acceptance),
            web.post("/emulator/metrics-fault", self.set_metrics_fault),
            web.get("/emulator/state", self.state),
        ]
        if cfg.engine == "vllm" or cfg.enable_metrics:
            routes.append(web.get(vllm_engine.METRICS_PATH, self.metrics))
        if cfg.engine == "vllm":
            routes += [
                web.get("/version", self.version),
                web.post("/tokenize", self.tokenize),
                web.post("/detokenize", self.detokenize),
            ]
        else:
            routes += [
                web.post("/generate", self.generate),
                web.put("/generate", self.generate),
                web.post("/flush_cache", self.flush_cache),
                web.get("/flush_cache", self.flush_cache),
                web.get(sglang_engine.READINESS_PATH, self.health_generate),
                web.get("/ready", self.health),
                web.get(sglang_engine.MODEL_INFO_PATH, self.model_info),
                web.get(sglang_engine.LEGACY_MODEL_INFO_PATH, self.model_info),
                web.get(sglang_engine.SERVER_INFO_PATH, self.server_info),
                web.get(sglang_engine.LEGACY_SERVER_INFO_PATH, self.server_info),
            ]
        app.add_routes(routes)
        return app

    # ------------------------------------------------------------------------------------ health

    def _not_ready(self) -> web.Response | None:
        if self.engine.ready:
            return None
        return _error(f"the engine is {self.engine.status}", 503, "ServiceUnavailableError")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.engine.ready else 503)

    async def health_generate(self, request: web.Request) -> web.Response:
        if not self.engine.ready:
            return web.Response(status=503)
        # A one-token generation: one prefill on the modelled clock, kept out of the metrics.
        await Pacer(self.engine.settings.time_scale).advance(self.engine.decoder.prefill_seconds())
        return web.Response(status=200)

    # ------------------------------------------------------------------------------------- info

    async def models(self, request: web.Request) -> web.Response:
        cfg = self.config
        names = cfg.served_model_names or (cfg.model,)
        data = [{"id": name, "object": "model", "created": self.created, "owned_by": cfg.engine,
                 "root": cfg.model, "parent": None, "max_model_len": cfg.context_length} for name in names]
        return web.json_response({"object": "list", "data": data})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": ENGINE_VERSIONS[self.config.engine]})

    async def model_info(self, request: web.Request) -> web.Response:
        cfg = self.config
        return web.json_response({
            "model_path": cfg.model, "tokenizer_path": str(TOKENIZER_DIR), "is_generation": True,
            "preferred_sampling_params": None, "weight_version": "default",
            "has_image_understanding": False, "has_audio_understanding": False,
        })

    async def server_info(self, request: web.Request) -> web.Response:
        cfg, spec = self.config, self.config.speculation
        exporter = self.engine.exporter
        internal = {"avg_spec_accept_length": None, "last_gen_throughput": 0.0}
        if isinstance(exporter, SglangExporter):
            internal = {"avg_spec_accept_length": exporter.avg_spec_accept_length if spec else None,
                        "last_gen_throughput": exporter.last_gen_throughput}
        return web.json_response({
            "model_path": cfg.model, "tokenizer_path": str(TOKENIZER_DIR), "served_model_name": cfg.model_name,
            "host": cfg.host, "port": cfg.port, "tp_size": cfg.tensor_parallel_size,
            "context_length": cfg.max_model_len, "mem_fraction_static": cfg.memory_fraction,
            "trust_remote_code": cfg.trust_remote_code, "enable_metrics": cfg.enable_metrics,
            "tool_call_parser": cfg.tool_call_parser, "reasoning_parser": cfg.reasoning_parser,
            "speculative_algorithm": spec.method if spec else None,
            "speculative_draft_model_path": spec.draft_model if spec else None,
            "speculative_num_steps": spec.num_speculative_tokens if spec else None,
            "speculative_eagle_topk": spec.eagle_topk if spec else None,
            "speculative_num_draft_tokens": spec.num_draft_tokens if spec else None,
            "internal_states": [internal],
            "version": ENGINE_VERSIONS[cfg.engine],
        })

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        fault = self.metrics_fault
        headers = {"Content-Type": CONTENT_TYPE_LATEST}
        if fault.mode == "hang":
            # Until the client gives up or the fault changes (then answer as the new fault says).
            changed = self._fault_changed
            while not changed.is_set():
                if request.transport is None or request.transport.is_closing():
                    return web.Response(status=499)  # nobody is listening any more
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), 0.5)
            return await self.metrics(request)
        if fault.mode == "reset":
            if request.transport is not None:
                request.transport.abort()  # no status line, no headers: the connection just ends
            return web.Response(status=499)
        if fault.mode == "status":
            return web.Response(status=fault.status, text=f"{fault.status} emulated /metrics failure\n")
        if fault.mode == "garbage":
            return web.Response(body=fault.body, headers=headers)
        if fault.mode == "slow":
            await asyncio.sleep(fault.seconds)
        body = self.engine.exporter.render()
        if fault.mode != "trickle":
            return web.Response(body=body, headers=headers)
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        pieces = 20
        step = -(-len(body) // pieces)
        try:
            for start in range(0, len(body), step):
                await asyncio.sleep(fault.seconds / pieces)
                await response.write(body[start:start + step])
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client gave up
        return response

    # ---------------------------------------------------------------------------------- control

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response(self.state_body())

    async def set_metrics_fault(self, request: web.Request) -> web.Response:
        try:
            fault = MetricsFault.from_json(await request.json())
        except (json.JSONDecodeError, ValueError) as exc:
            return _error(str(exc), 400, "BadRequestError")
        self.metrics_fault = fault
        self._fault_changed.set()  # wakes the requests hanging on the old fault
        self._fault_changed = asyncio.Event()
        return web.json_response(self.state_body())

    def state_body(self) -> dict[str, object]:
        return {**self.engine.state(), "metricsFault": self.metrics_fault.as_dict()}

    async def set_acceptance(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            acceptance = body["acceptance"]
            if self.config.speculation is None:
                return _error("this server runs without speculation", 409, "ConflictError")
            self.engine.set_acceptance(acceptance)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return _error(f'expected {{"acceptance": <number in [0, 1]>}}: {exc}', 400, "BadRequestError")
        return web.json_response(self.state_body())

    # ------------------------------------------------------------------------------ tokenizer

    @property
    def _served_names(self) -> tuple[str, ...]:
        return self.config.served_model_names or (self.config.model,)

    async def _json_body(self, request: web.Request) -> object:
        try:
            return await request.json()
        except json.JSONDecodeError as exc:
            raise RequestError(f"the request body is not JSON: {exc}") from None

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._json_body(request)
            return web.json_response(tokenize(body, served_names=self._served_names,
                                              context_length=self.config.context_length))
        except RequestError as exc:
            return web.json_response(exc.body(), status=exc.status)

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._json_body(request)
            return web.json_response(detokenize(body, served_names=self._served_names))
        except RequestError as exc:
            return web.json_response(exc.body(), status=exc.status)

    async def flush_cache(self, request: web.Request) -> web.Response:
        # The emulator keeps no prefix cache; SGLang's answer when the flush succeeds.
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n")

    # ------------------------------------------------------------------------------- generation

    def _draft_per_round(self) -> int:
        """Draft tokens SGLang counts as proposed per verification (its metrics_reporter.py)."""
        spec = self.config.speculation
        if spec is None:
            return 0
        return spec.num_draft_tokens - 1 if spec.num_draft_tokens else self.config.k

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """SGLang's native /generate (``emulator/native.py``)."""
        not_ready = self._not_ready()
        if not_ready is not None:
            return not_ready
        try:
            body = await self._json_body(request)
            req = parse_generate(body, context_length=self.config.context_length)
        except RequestError as exc:
            return web.json_response(exc.body(), status=exc.status)
        builder = NativeResponseBuilder(req, draft_per_round=self._draft_per_round())
        logged = LoggedRequest("sglang", self.engine.request_log, body, request.headers, chat=False, native=True,
                               draft_per_round=self._draft_per_round())
        logged.accepted_native(req)
        arrival = time.monotonic()
        steps = self.engine.generate(req.prompt_tokens, req.max_new_tokens, streaming=req.stream,
                                     category=self.engine.traffic_category(body))
        if not req.stream:
            async with contextlib.aclosing(steps) as generation:
                async for step in generation:
                    builder.add_step(step)
                    logged.step(step, last=False)
            logged.finished(streamed=False, finish_reason="length")
            return web.json_response(builder.body(finished=True, e2e_latency=time.monotonic() - arrival))

        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            async with contextlib.aclosing(steps) as generation:
                async for step in generation:
                    builder.add_step(step)
                    logged.step(step, last=False)
                    finished = len(builder.output_ids) >= req.max_new_tokens
                    await response.write(sse(builder.body(
                        finished=finished, e2e_latency=time.monotonic() - arrival if finished else None)))
            logged.finished(streamed=True, finish_reason="length")
            await response.write(SSE_DONE)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away; the generator was closed and counted the request as aborted
        return response


    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        not_ready = self._not_ready()
        if not_ready is not None:
            return not_ready
        cfg = self.config
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _error(f"the request body is not JSON: {exc}", 400, "BadRequestError")
        logged = LoggedRequest(cfg.engine, self.engine.request_log, body, request.headers, chat=chat,
                               draft_per_round=self._draft_per_round()) if isinstance(body, dict) else None
        try:
            req = parse_request(body, chat=chat, served_names=cfg.served_model_names or (cfg.model,),
                                context_length=cfg.context_length, strict_model=cfg.engine == "vllm")
        except RequestError as exc:
            return web.json_response(exc.body(), status=exc.status)
        assert logged is not None  # parse_request refuses a body that is not an object
        logged.accepted(req, cfg.context_length)
        builder = ResponseBuilder(req, req.model, cfg.engine, response_id=logged.response_id)
        # The target's own continuation where the answer shows what it is made of (logprobs, token ids): a client
        # comparing outputs reads it. Other requests get synthetic words, which cost the emulator nothing per token
        # (at a tenth of real time and 32 streams, 2 us a token would be 15% of a modelled step, read as a slower
        # engine by the wall-clock benchmarks).
        continuation = self.engine.continuation(list(req.prompt_ids)) \
            if req.top_logprobs is not None or req.return_token_ids else None
        steps = self.engine.generate(req.prompt_tokens, req.max_tokens, streaming=req.stream, continuation=continuation,
                                     category=self.engine.traffic_category(body))

        if not req.stream:
            tokens: list[str] = []
            async with contextlib.aclosing(steps) as generation:
                async for step in generation:
                    tokens.extend(step)
                    logged.step(step, last=False)
            logged.finished(streamed=False, finish_reason=req.finish_reason)
            return web.json_response(builder.full_response(
                tokens, continuation.tokens() if continuation is not None else None))

        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            async with contextlib.aclosing(steps) as generation:
                if chat:
                    await response.write(sse(builder.role_chunk()))
                emitted = 0
                async for step in generation:
                    generated = continuation.tokens(emitted, emitted + len(step)) if continuation is not None else None
                    emitted += len(step)
                    logged.step(step, last=emitted >= req.max_tokens, finish_reason=req.finish_reason)
                    await response.write(sse(builder.text_chunk(step, last=emitted >= req.max_tokens,
                                                                generated=generated)))
                logged.finished(streamed=True, finish_reason=req.finish_reason)
            if req.include_usage:
                await response.write(sse(builder.usage_chunk()))
            await response.write(SSE_DONE)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away; the generator was closed and counted the request as aborted
        return response


class EmulatorServer:
    """One emulator on a TCP socket; ``port`` is the bound port (pass 0 for a free one)."""

    def __init__(self, engine: EmulatedEngine, host: str, port: int) -> None:
        self.engine = engine
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(EmulatorApp(self.engine).build(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        addresses = self._runner.addresses
        if addresses:
            self.port = addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.engine.request_log is not None:
            self.engine.request_log.close()  # flushed and closed as the engine's handlers are at exit


def _log(line: str) -> None:
    print(f"drafter-operator emulate: {line}", file=sys.stderr, flush=True)


def build_engine(argv: list[str], env: Mapping[str, str], log: Callable[[str], None] = _log) -> EmulatedEngine:
    """Parse the command line and environment into an engine (raises like ``main`` reports).

    Resolves hub ids against the hub cache before the engine (and its startup delay) starts: offline and
    not cached raises :class:`HubModelUnavailable` at once; online and not cached waits out the emulated
    download (``emulator/hub.py``).
    """
    config = parse_command_line(argv)
    problems = [*startup_problems(config), *config.group_problems]
    if problems:  # what the real engine refuses once it reads the model config
        raise ValueError("; ".join(problems))
    if config.speculation is not None and config.speculation.adaptive_dropped:
        log(disabled_warning(config.speculation.adaptive_dropped))  # SGLang's warning, and it serves static steps
    settings = Settings.from_env(env)
    profile = load_profile(settings.profile_path)
    names = environment_names(env)
    log(f"environment: {len(names)} variables (names only, in /emulator/state): {', '.join(names)}")
    hub = resolve_models(config, env, download_seconds=settings.download_seconds, log=log)
    return EmulatedEngine(config, settings, profile, environment_names=names, hub=hub, environment=env)


def bind_host(engine: EmulatedEngine) -> str:
    return engine.settings.host or engine.config.host


def _describe(engine: EmulatedEngine, url: str) -> str:
    cfg, spec = engine.config, engine.config.speculation
    p = engine.decoder.prediction()
    if spec is None:
        speculation = "no speculation"
    else:
        speculation = (f"{spec.method} drafter={spec.drafter_key} k={spec.num_speculative_tokens} "
                       f"a={engine.decoder.acceptance:.3f} ({engine.acceptance_source}): "
                       f"rate {p.acceptance_rate:.1%}, length {p.mean_acceptance_length:.2f}, {p.speedup:.2f}x")
    return (f"drafter-operator emulate: {cfg.engine} ({cfg.entrypoint}) serving {cfg.model_name} on {url}; "
            f"{speculation}; {p.tokens_per_second:.1f} tok/s single stream; time scale {engine.settings.time_scale}; "
            f"startup {'fails' if engine.settings.fail_startup else f'{engine.settings.startup_seconds:g}s'}")


def _describe_group(group: GroupConfig) -> str:
    role = "leader" if group.is_leader else "worker"
    api = "serves the API" if group.serves_api else "serves no API"
    return (f"drafter-operator emulate: node rank {group.node_rank} of {group.nnodes} ({role}, {api}); the process "
            f"group meets at {group.address}")


async def _serve(engine: EmulatedEngine) -> int:
    """Serve until SIGTERM or SIGINT (0), or until the replica's process group breaks (1, the message on stderr).
    On one node: the API alone. Node rank 0 of several also holds the group's meeting port and is not ready until
    every other rank joined; a worker joins its leader and serves the API only where its engine would."""
    group = engine.config.group
    stop = asyncio.Event()
    broken: list[str] = []

    def group_broken(message: str) -> None:
        broken.append(message)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    leader: Leader | None = None
    server: EmulatorServer | None = None
    member: asyncio.Task | None = None
    try:
        if group is not None:
            print(_describe_group(group), file=sys.stderr, flush=True)
        if group is not None and group.is_leader:
            leader = Leader(group, group_broken, _log)
            try:
                await leader.start(bind_host(engine))
            except OSError as exc:
                print(f"drafter-operator emulate: cannot listen on {bind_host(engine)}:{group.leader_port} for the "
                      f"process group: {exc}", file=sys.stderr)
                return 1
            engine.group_leader = leader
        if engine.config.serves_api:
            server = EmulatorServer(engine, bind_host(engine), engine.config.port)
            try:
                await server.start()
            except OSError as exc:
                print(f"drafter-operator emulate: cannot listen on {server.host}:{server.port}: {exc}", file=sys.stderr)
                server = None
                return 1
            print(_describe(engine, server.url), file=sys.stderr, flush=True)
        if group is not None and not group.is_leader:
            member = asyncio.create_task(_worker(group, engine.settings.group_join_seconds, group_broken))
        await stop.wait()
    finally:
        if member is not None:
            member.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await member
        if server is not None:
            await server.stop()
        if leader is not None:
            await leader.stop()
    if broken:
        print(f"drafter-operator emulate: error: {broken[0]}", file=sys.stderr, flush=True)
        return GROUP_BROKEN_STATUS
    return 0


async def _worker(group: GroupConfig, join_seconds: float, broken: Callable[[str], None]) -> None:
    """A worker's life in its group: join the leader, then hold the connection; ``broken`` hears why it ended."""
    try:
        reader, writer = await join(group, join_seconds, _log)
    except GroupRefused as exc:
        broken(str(exc))
        return
    try:
        broken(await stay(reader, writer, group))
    finally:
        writer.close()


def main(argv: list[str]) -> int:
    """Entry point of ``drafter-operator emulate <engine command line>``."""
    try:
        engine = build_engine(list(argv), os.environ)
    except CommandLineError as exc:
        print(f"{USAGE}\ndrafter-operator emulate: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2)
        return exc.code if isinstance(exc.code, int) else 2
    except (ValueError, ProfileError) as exc:
        print(f"drafter-operator emulate: error: {exc}", file=sys.stderr)
        return 2
    except HubModelUnavailable as exc:  # the engine's own error, as the last lines of its traceback
        print(exc, file=sys.stderr, flush=True)
        return exc.status
    try:
        return asyncio.run(_serve(engine))
    except KeyboardInterrupt:
        return 0
