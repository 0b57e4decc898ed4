"""A webhook receiver on 127.0.0.1 for the notification tests: verifies every Standard Webhooks
signature, answers per a script of faults (500, a slow answer, a closed connection) for a while, then
takes everything; records what it took by webhook-id, as a receiver that dedups would."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

SECRET = "whsec_" + "dGVzdC1zZWNyZXQtZm9yLXRoZS1ub3RpZmljYXRpb24tdGVzdHM="


class Receiver:
    """``faults``: what the first requests get, in turn ("500", "slow", "close", "ok"); every later
    request is taken. ``slow_s``: how long a slow answer takes (longer than the sender's timeout)."""

    def __init__(self, faults: list[str] = (), slow_s: float = 1.0, secret: str = SECRET) -> None:
        self.faults, self.slow_s, self.webhook = list(faults), slow_s, Webhook(secret)
        self.lock = threading.Lock()
        self.requests = 0
        self.answers: Counter[str] = Counter()
        self.taken: dict[str, dict] = {}  # webhook-id -> the CloudEvent, once
        self.copies: Counter[str] = Counter()  # webhook-id -> requests that carried it
        self.after_taken: list[str] = []  # ids sent again after a fast 2xx: must stay empty
        self.bad_signatures = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/usage"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _next(self) -> str:
        with self.lock:
            self.requests += 1
            return self.faults[self.requests - 1] if self.requests <= len(self.faults) else "ok"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    receiver.webhook.verify(body, dict(self.headers))
                except WebhookVerificationError:
                    with receiver.lock:
                        receiver.bad_signatures += 1
                    self._answer(401)
                    return
                event = json.loads(body)
                msg_id = self.headers["webhook-id"]
                assert (
                    event["id"] == msg_id and self.headers["content-type"] == "application/cloudevents+json"
                )
                mode = receiver._next()
                with receiver.lock:
                    receiver.copies[msg_id] += 1
                    receiver.answers[mode] += 1
                if mode == "close":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode == "500":
                    self._answer(500)
                    return
                if mode == "slow":
                    time.sleep(receiver.slow_s)
                with receiver.lock:
                    if mode == "ok" and msg_id in receiver.taken and msg_id not in receiver.slow_ids:
                        receiver.after_taken.append(msg_id)
                    receiver.taken.setdefault(msg_id, event)
                    if mode == "slow":
                        receiver.slow_ids.add(msg_id)
                self._answer(204)

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

        self.slow_ids: set[str] = set()  # taken only after the sender gave up: it may come again
        return Handler
