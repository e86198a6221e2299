"""HTTP emulators of Alibaba Cloud APIs that the real SDKs can talk to over plain HTTP.

Tests point an SDK client at ``Config(endpoint=server.endpoint, protocol="http")``; the server
then sees exactly what the SDK would send to the cloud (tea-openapi's ACS3-HMAC-SHA256 signed
requests, ROA paths or RPC actions) and answers in the shapes tea-openapi parses, so the SDK's own
response models and exception classes are exercised rather than mocked.

Errors follow the POP gateway's JSON shape ``{"RequestId", "HostId", "Code", "Message"}``, the
same for ROA and RPC: tea-openapi reads ``Code``/``Message``/``RequestId`` from it and raises
``ClientException`` (4xx) or ``ServerException`` (5xx).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar, cast
from urllib.parse import parse_qsl, quote, unquote, urlsplit

if TYPE_CHECKING:
    from darabonba.model import DaraModel

#: The only signature algorithm the emulators verify: tea-openapi's default for every style.
SIGNATURE_ALGORITHM = "ACS3-HMAC-SHA256"

THROTTLING_CODE = "Throttling.User"
THROTTLING_MESSAGE = "Request was denied due to user flow control."

_H = TypeVar("_H", bound=BaseHTTPRequestHandler)


def iso_utc(epoch: float) -> str:
    """Format a time the way Alibaba Cloud APIs return it: ISO 8601, UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def parse_iso_utc(text: str) -> float:
    """Parse an ISO 8601 UTC time (``Z`` suffix, optional fraction) to epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def new_request_id() -> str:
    """A request id shaped like the cloud's (an upper-case UUID)."""
    return str(uuid.uuid4()).upper()


class ManualClock:
    """A clock tests move by hand, for ``server.clock``: lifecycles advance without sleeping."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds``; return the new time."""
        with self._lock:
            self.now += seconds
            return self.now


class ApiError(Exception):
    """An error answer: raised by handlers and checks, turned into the gateway's error JSON."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class RateFaultPlan:
    """Targeting and the failure draw shared by the emulators' seeded fault plans.

    The POP gateway's :class:`FaultPlan` and OSS's plan fail different things but choose alike:
    a request of an operation in :meth:`scope` (every one when it is None) draws once, and the
    draw picks the first failure whose cumulative rate exceeds it. Keeping that in one place keeps
    a seed replaying the same way in every emulator. Subclasses are frozen dataclasses with a
    ``seed`` field.
    """

    seed: int

    def scope(self) -> frozenset[str] | None:
        """The operations (actions) the plan targets; None: every one."""
        raise NotImplementedError

    def failure_rates(self) -> tuple[tuple[str, float], ...]:
        """``(failure, rate)`` pairs in the order their rates accumulate."""
        raise NotImplementedError

    def targets(self, operation: str) -> bool:
        """Whether requests of ``operation`` are subject to this plan."""
        scope = self.scope()
        return scope is None or operation in scope

    def outcome(self, failure_draw: float) -> str:
        """Map a uniform draw to the failure it picks, or ``""`` for none."""
        bound = 0.0
        for name, rate in self.failure_rates():
            bound += rate
            if failure_draw < bound:
                return name
        return ""


_P = TypeVar("_P", bound=RateFaultPlan)


class SeededFaults(Generic[_P]):
    """The ``faults`` attribute of an emulator: a plan and the RNG its seed starts.

    Why a property: assigning a plan must restart the RNG from the plan's seed (under the
    emulator's lock, as requests draw from it concurrently), so a failing test replays exactly.
    """

    _lock: threading.RLock
    _faults: _P
    _rng: random.Random

    @property
    def faults(self) -> _P:
        """The rate-based fault plan; assigning one restarts its RNG from the plan's seed."""
        return self._faults

    @faults.setter
    def faults(self, plan: _P) -> None:
        with self._lock:
            self._faults = plan
            self._rng = random.Random(plan.seed)


@dataclass(frozen=True)
class FaultPlan(RateFaultPlan):
    """Which requests fail on purpose, drawn from a seeded RNG so a failing test replays exactly.

    Every request of a targeted action (all actions when ``actions`` is None) draws twice: one
    draw picks throttle / unavailable / drop / none by cumulative rate, the other decides whether
    the answer is delayed by ``slow_seconds``. A throttled, unavailable or dropped request never
    reaches the handler, so it changes no state; a slow one is answered normally, late.
    """

    throttle_rate: float = 0.0
    unavailable_rate: float = 0.0
    slow_rate: float = 0.0
    slow_seconds: float = 0.0
    drop_rate: float = 0.0
    seed: int = 0
    actions: frozenset[str] | None = None

    def scope(self) -> frozenset[str] | None:
        return self.actions

    def failure_rates(self) -> tuple[tuple[str, float], ...]:
        return (
            ("throttle", self.throttle_rate),
            ("unavailable", self.unavailable_rate),
            ("drop", self.drop_rate),
        )


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it, with the answer it got.

    ``status`` is 0 for a dropped connection; ``fault`` names the injected fault ("throttle",
    "unavailable", "drop", "slow") or is empty. ``at`` is when the request arrived (``time.time()``,
    not the emulator's clock): what a client-side rate limit bounds is the requests a server
    receives in a window of real time.
    """

    action: str
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]
    status: int
    fault: str = ""
    request_id: str = ""
    at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class ApiRequest:
    """What a handler gets: the parsed request plus the caller's AccessKeyId."""

    action: str
    method: str
    path: str
    path_params: dict[str, str]
    query: dict[str, str]
    body: Any
    headers: dict[str, str]
    access_key_id: str


Handler = Callable[[ApiRequest], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    """An API operation: how it is addressed and which SDK model its answer must parse into."""

    action: str
    handler: Handler
    method: str = ""
    pattern: re.Pattern[str] | None = None
    response_model: type[DaraModel] | None = None
    request_id_key: str = "RequestId"


@dataclass(frozen=True)
class IssuedToken:
    """An STS security token a server accepts until ``expires_at`` (epoch seconds)."""

    access_key_id: str
    access_key_secret: str
    expires_at: float


@dataclass
class _Exchange:
    """The request being served and the answer it gets, threaded through the serving steps."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw_body: bytes
    #: When the request had arrived (read whole), in ``time.time()`` seconds: ``RecordedRequest.at``.
    received_at: float = field(default_factory=time.time)
    route: Route | None = None
    path_params: dict[str, str] = field(default_factory=dict)
    request_id: str = field(default_factory=new_request_id)
    fault: str = ""
    status: int = 200
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def action(self) -> str:
        return self.route.action if self.route else self.headers.get("x-acs-action", "")


def model_mismatches(model: type[DaraModel], data: Any, where: str = "") -> list[str]:
    """Where ``data`` differs from what ``model().from_map(data).to_map()`` gives back.

    An empty list means the SDK model reproduces ``data`` exactly, i.e. every key is a wire name
    the SDK knows. Keys the model adds as empty lists are ignored: its ``to_map`` always emits
    them. Used both to reject request bodies the SDK could not have produced and to check that
    every answer parses into the SDK's response model.
    """
    try:
        parsed = model().from_map(data).to_map()
    except (AttributeError, TypeError, ValueError) as exc:
        return [f"{where or 'body'} does not parse into {model.__name__}: {exc}"]
    return _diff(data, parsed, where)


def query_checked(
    handler: Handler,
    request_models: Mapping[str, type[DaraModel]],
    unflatten: Callable[[Mapping[str, str]], dict[str, Any]],
    before: Callable[[], None],
) -> Handler:
    """Wrap an RPC handler: 400 for a query the SDK could not have sent, then ``before()``, then it.

    RPC emulators (ACR, NAS) get flat queries such as ``Filters.1.Key=a``; ``unflatten`` rebuilds
    the nested shape the action's request model maps from, and any field that model does not know
    is refused as the cloud does (InvalidParameter), so a misspelt or invented parameter fails the
    test instead of being ignored. Missing fields are the handler's business: optional ones are
    the norm. ``before`` runs for every accepted request (advancing simulated builds or tasks).
    """

    def checked(request: ApiRequest) -> dict[str, Any]:
        nested = unflatten(request.query)
        problems = [p for p in model_mismatches(request_models[request.action], nested) if "known" in p]
        if problems:
            raise ApiError(400, "InvalidParameter", f"{request.action}: {'; '.join(problems)}")
        before()
        return handler(request)

    return checked


def _diff(sent: Any, parsed: Any, where: str) -> list[str]:
    """Recursive comparison behind :func:`model_mismatches`."""
    if isinstance(sent, dict) and isinstance(parsed, dict):
        problems = [f"{_join(where, key)} is not a known field" for key in sent if key not in parsed]
        problems += [
            f"{_join(where, key)} is missing" for key in parsed if key not in sent and parsed[key] != []
        ]
        for key in sent.keys() & parsed.keys():
            problems += _diff(sent[key], parsed[key], _join(where, key))
        return problems
    if isinstance(sent, list) and isinstance(parsed, list) and len(sent) == len(parsed):
        return [
            p for i, (s, q) in enumerate(zip(sent, parsed, strict=True)) for p in _diff(s, q, f"{where}[{i}]")
        ]
    return [] if sent == parsed else [f"{where or 'body'} has an unexpected shape: {sent!r}"]


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _pattern(path_template: str) -> re.Pattern[str]:
    """Compile ``/api/v1/jobs/{JobId}`` into a regex with one named group per placeholder."""
    regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path_template))
    return re.compile(f"^{regex}$")


def bound_handler(handler: type[_H], **attributes: object) -> type[_H]:
    """A subclass of ``handler`` carrying ``attributes`` (the emulator it serves) as class attributes.

    ``http.server`` builds one handler instance per request from a class, so the only way to hand
    it the emulator is on the class; a fresh subclass per server keeps two servers apart.
    """
    return cast("type[_H]", type(f"_Bound{handler.__name__}", (handler,), dict(attributes)))


class ThreadedHttpServer:
    """Start, stop and ``with`` of an emulator served by a ``ThreadingHTTPServer`` on 127.0.0.1.

    Every HTTP emulator (the POP gateway of :class:`EmulatorServer`, OSS, the image registry)
    serves from a daemon thread, polls often enough that ``stop`` returns quickly, must release
    its port on ``stop`` because a test session starts hundreds, and is used as a context manager;
    one implementation keeps them alike. Subclasses build the server in :meth:`_make_server`
    (binding their handler class to ``self`` with :func:`bound_handler`) and may cut what
    ``server_close`` leaves open in :meth:`_before_close`.
    """

    #: The RuntimeError message for asking a stopped server its address.
    not_started_message: ClassVar[str] = "the emulator is not started"
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def _make_server(self) -> ThreadingHTTPServer:
        """The bound, not yet serving server (its constructor binds and listens)."""
        raise NotImplementedError

    def _before_close(self, httpd: ThreadingHTTPServer) -> None:
        """Runs after ``shutdown`` and before ``server_close``; nothing unless overridden."""

    @property
    def host_port(self) -> str:
        """``127.0.0.1:PORT`` of the serving server; RuntimeError when it is not started."""
        if self._httpd is None:
            raise RuntimeError(self.not_started_message)
        return f"127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> Self:
        """Listen (on a free port unless the subclass picks one) and serve from a daemon thread."""
        self._httpd = self._make_server()
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; a stopped server may be started again."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._before_close(self._httpd)
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class EmulatorServer(ThreadedHttpServer, SeededFaults[FaultPlan]):
    """A threaded HTTP server on 127.0.0.1 that authenticates, records and fault-injects requests.

    Subclasses register operations with :meth:`add_roa_route` / :meth:`add_rpc_action` and set
    ``api_version`` to the version their SDK sends in ``x-acs-version``. Handlers run under one
    lock, so emulated state needs no locking of its own.
    """

    api_version: ClassVar[str] = ""

    def __init__(self, access_keys: Mapping[str, str | None] | None = None) -> None:
        self.clock: Callable[[], float] = time.time
        self.faults_injected = 0
        self.internal_errors: list[str] = []
        self._lock = threading.RLock()
        self._records: list[RecordedRequest] = []
        self._access_keys: dict[str, str | None] = dict(access_keys or {})
        self._tokens: dict[str, IssuedToken] = {}
        self._roa_routes: list[Route] = []
        self._rpc_routes: dict[str, Route] = {}
        self.faults = FaultPlan()

    # ----------------------------------------------------------------------------- lifecycle

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:PORT``, the value for the SDK's ``Config(endpoint=...)``."""
        return self.host_port

    def _make_server(self) -> ThreadingHTTPServer:
        """A free port on 127.0.0.1, answered by the tea-openapi request handler."""
        return ThreadingHTTPServer(("127.0.0.1", 0), bound_handler(_RequestHandler, emulator=self))

    # ----------------------------------------------------------------------------- routing

    def add_roa_route(
        self,
        method: str,
        path_template: str,
        action: str,
        handler: Handler,
        response_model: type[DaraModel] | None = None,
        request_id_key: str = "RequestId",
    ) -> None:
        """Serve a ROA operation: ``method`` on a path such as ``/api/v1/jobs/{JobId}``."""
        self._roa_routes.append(
            Route(action, handler, method, _pattern(path_template), response_model, request_id_key)
        )

    def add_rpc_action(
        self, action: str, handler: Handler, response_model: type[DaraModel] | None = None
    ) -> None:
        """Serve an RPC action: GET or POST ``/`` with the action in ``x-acs-action`` or ``Action``."""
        self._rpc_routes[action] = Route(action, handler, response_model=response_model)

    def _resolve(self, exchange: _Exchange) -> None:
        """Find the route for a request and its path parameters, or answer 404."""
        if exchange.path == "/" and self._rpc_routes:
            action = exchange.headers.get("x-acs-action") or exchange.query.get("Action", "")
            exchange.route = self._rpc_routes.get(action)
        for route in self._roa_routes:
            match = route.pattern.match(exchange.path) if route.pattern else None
            if match and route.method == exchange.method:
                exchange.route = route
                exchange.path_params = {k: unquote(v) for k, v in match.groupdict().items()}
                break
        if exchange.route is None:
            raise ApiError(
                404, "InvalidAction.NotFound", "Specified api is not found, please check your url and method."
            )

    # ----------------------------------------------------------------------------- credentials

    def accept_access_key(self, access_key_id: str, access_key_secret: str | None = None) -> None:
        """Accept a long-term AccessKey; with its secret, signatures are verified too."""
        with self._lock:
            self._access_keys[access_key_id] = access_key_secret

    def issue_security_token(self, token: str, issued: IssuedToken) -> None:
        """Accept an STS token (with its AccessKey pair) until ``issued.expires_at``."""
        with self._lock:
            self._tokens[token] = issued

    def expire_security_token(self, token: str) -> None:
        """Make a token expired now: later requests with it fail with InvalidSecurityToken.Expired."""
        with self._lock:
            issued = self._tokens[token]
            self._tokens[token] = IssuedToken(
                issued.access_key_id, issued.access_key_secret, self.clock() - 1
            )

    def _authenticate(self, exchange: _Exchange) -> str:
        """Check the ACS3 Authorization header (and STS token); return the caller's AccessKeyId."""
        credential, signed_headers, signature = _parse_authorization(
            exchange.headers.get("authorization", "")
        )
        secret = self._secret_for(credential, exchange.headers.get("x-acs-security-token"))
        if secret is not None and not hmac.compare_digest(
            signature, _signature(exchange, signed_headers, secret)
        ):
            raise ApiError(
                400, "SignatureDoesNotMatch", "Specified signature is not matched with our calculation."
            )
        return credential

    def _secret_for(self, access_key_id: str, token: str | None) -> str | None:
        """The secret to verify with (None: AccessKeyId accepted without a known secret)."""
        if token is None:
            if access_key_id not in self._access_keys:
                raise ApiError(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
            return self._access_keys[access_key_id]
        issued = self._tokens.get(token)
        if issued is None:
            raise ApiError(400, "InvalidSecurityToken.Malformed", "Specified SecurityToken is malformed.")
        if issued.access_key_id != access_key_id:
            raise ApiError(
                400,
                "InvalidSecurityToken.MismatchWithAccessKey",
                "Specified SecurityToken mismatch with the AccessKey.",
            )
        if self.clock() >= issued.expires_at:
            raise ApiError(400, "InvalidSecurityToken.Expired", "Specified SecurityToken is expired.")
        return issued.access_key_secret

    # ----------------------------------------------------------------------------- records

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request served so far, oldest first (a copy)."""
        with self._lock:
            return list(self._records)

    def requests_for(self, action: str) -> list[RecordedRequest]:
        """The recorded requests of one action, oldest first."""
        return [r for r in self.requests if r.action == action]

    def count(self, action: str) -> int:
        """How many requests of ``action`` arrived, faulted or not."""
        return len(self.requests_for(action))

    def _record(self, exchange: _Exchange, body: Any) -> None:
        with self._lock:
            self._records.append(
                RecordedRequest(
                    action=exchange.action,
                    method=exchange.method,
                    path=exchange.path,
                    query=dict(exchange.query),
                    body=body,
                    headers=dict(exchange.headers),
                    status=exchange.status,
                    fault=exchange.fault,
                    request_id=exchange.request_id,
                    at=exchange.received_at,
                )
            )

    # ----------------------------------------------------------------------------- serving

    def _draw_fault(self, exchange: _Exchange) -> tuple[str, float]:
        """Decide this request's injected failure and delay under the lock (deterministic order)."""
        with self._lock:
            plan = self._faults
            if exchange.route is None or not plan.targets(exchange.action):
                return "", 0.0
            failure, slow = self._rng.random(), self._rng.random()
            outcome = plan.outcome(failure)
            delay = plan.slow_seconds if slow < plan.slow_rate else 0.0
            if outcome or delay:
                self.faults_injected += 1
            return outcome, delay

    def _serve(self, exchange: _Exchange) -> bool:
        """Answer one request into ``exchange``; False means drop the connection unanswered."""
        body: Any = None
        try:
            self._resolve(exchange)
            outcome, delay = self._draw_fault(exchange)
            exchange.fault = outcome or ("slow" if delay else "")
            if outcome == "drop":
                exchange.status = 0
                self._record(exchange, _parse_body(exchange))
                return False
            time.sleep(delay)
            body = _parse_body(exchange)
            self._answer(exchange, outcome, body)
        except ApiError as error:
            _fail(exchange, error)
        except Exception as exc:  # an emulator bug: answer it like the cloud would, and keep it visible
            with self._lock:
                self.internal_errors.append(f"{exchange.action}: {exc!r}")
            _fail(exchange, ApiError(500, "InternalError", f"The emulator failed: {exc!r}"))
        self._record(exchange, body)
        return True

    def _answer(self, exchange: _Exchange, outcome: str, body: Any) -> None:
        """Authenticate, apply an injected failure or run the handler, and check the answer's shape."""
        access_key_id = self._authenticate(exchange)
        self._check_version(exchange)
        if outcome == "throttle":
            raise ApiError(400, THROTTLING_CODE, THROTTLING_MESSAGE)
        if outcome == "unavailable":
            raise ApiError(
                503, "ServiceUnavailable", "The request has failed due to a temporary failure of the server."
            )
        route = exchange.route
        assert route is not None
        request = ApiRequest(
            route.action,
            exchange.method,
            exchange.path,
            exchange.path_params,
            exchange.query,
            body,
            exchange.headers,
            access_key_id,
        )
        with self._lock:
            payload = {**route.handler(request), route.request_id_key: exchange.request_id}
        self._check_shape(route, payload)
        exchange.payload = payload

    def _check_version(self, exchange: _Exchange) -> None:
        version = exchange.headers.get("x-acs-version") or exchange.query.get("Version", "")
        if version != self.api_version:
            raise ApiError(400, "InvalidVersion", "Specified parameter Version is not valid.")

    def _check_shape(self, route: Route, payload: dict[str, Any]) -> None:
        """Refuse to send an answer the SDK's response model would not reproduce: an emulator bug."""
        model = route.response_model
        if not model:
            return
        problems = model_mismatches(model, payload)
        if problems:
            message = f"{route.action} answer does not fit {model.__name__}: {problems}"
            with self._lock:
                self.internal_errors.append(message)
            raise ApiError(500, "InternalError", message)


def _fail(exchange: _Exchange, error: ApiError) -> None:
    """Turn ``error`` into the gateway's error answer, the one shape tea-openapi parses for every style."""
    exchange.status = error.status
    exchange.payload = {
        "RequestId": exchange.request_id,
        "HostId": exchange.headers.get("host", ""),
        "Code": error.code,
        "Message": error.message,
    }


def _parse_body(exchange: _Exchange) -> Any:
    """Decode a JSON or form body; anything else is kept as text (or None when empty)."""
    if not exchange.raw_body:
        return None
    text = exchange.raw_body.decode("utf-8")
    content_type = exchange.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ApiError(400, "InvalidParameter", f"The request body is not valid JSON: {exc}") from exc
    if content_type.startswith("application/x-www-form-urlencoded"):
        return dict(parse_qsl(text, keep_blank_values=True))
    return text


def _parse_authorization(header: str) -> tuple[str, list[str], str]:
    """Split ``ACS3-HMAC-SHA256 Credential=AK,SignedHeaders=a;b,Signature=hex``."""
    algorithm, _, rest = header.partition(" ")
    fields = dict(part.strip().partition("=")[::2] for part in rest.split(","))
    if algorithm != SIGNATURE_ALGORITHM or not all(
        fields.get(k) for k in ("Credential", "SignedHeaders", "Signature")
    ):
        raise ApiError(
            400, "IncompleteSignature", "The request signature does not conform to Aliyun standards."
        )
    return fields["Credential"], fields["SignedHeaders"].split(";"), fields["Signature"]


def _signature(exchange: _Exchange, signed_headers: list[str], secret: str) -> str:
    """Recompute the ACS3-HMAC-SHA256 signature the way tea-openapi's ``get_authorization`` does."""
    query = "&".join(f"{k}={quote(exchange.query[k], safe='~')}" for k in sorted(exchange.query))
    headers = "".join(f"{name}:{exchange.headers.get(name, '').strip()}\n" for name in signed_headers)
    canonical_request = "\n".join(
        [
            exchange.method,
            exchange.path,
            query,
            headers,
            ";".join(signed_headers),
            hashlib.sha256(exchange.raw_body).hexdigest(),
        ]
    )
    string_to_sign = f"{SIGNATURE_ALGORITHM}\n{hashlib.sha256(canonical_request.encode()).hexdigest()}"
    return hmac.new(secret.encode(), string_to_sign.encode(), hashlib.sha256).hexdigest()


class _RequestHandler(BaseHTTPRequestHandler):
    """Turns raw HTTP into an :class:`_Exchange` for the emulator and writes its answer back."""

    emulator: ClassVar[EmulatorServer]
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        exchange = _Exchange(
            method=self.command,
            path=url.path,
            query=dict(parse_qsl(url.query, keep_blank_values=True)),
            headers={k.lower(): v for k, v in self.headers.items()},
            raw_body=self.rfile.read(length) if length else b"",
        )
        if not self.emulator._serve(exchange):
            self.close_connection = True
            return
        self._write(exchange)

    do_POST = do_PUT = do_DELETE = do_GET

    def _write(self, exchange: _Exchange) -> None:
        data = json.dumps(exchange.payload).encode()
        try:
            self.send_response(exchange.status)
            self.send_header("Content-Type", "application/json;charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-acs-request-id", exchange.request_id)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its read timeout on a slow answer)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean: requests are recorded on the emulator instead."""
