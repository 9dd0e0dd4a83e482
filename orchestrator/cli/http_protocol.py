"""How ``payorch api`` speaks HTTP: uvicorn on h11, with a limit on the request's head.

httptools, which uvicorn picks when it is installed, sets no limit on the size of a
request's head: it buffered every byte of 200 MiB of headers before the middleware's 431
(``api.middleware``) could look at them, and no API key is needed to send them.  h11
refuses a head larger than its incomplete-event limit while it is still arriving; this
protocol answers that refusal with a 431 problem document (uvicorn's own answer is a
plain-text 400) and closes the connection, so nothing more of the request is read.

The limit is the middleware's 16 KiB of headers (``api.middleware.MAX_HEADER_BYTES``; the
command line may not import the API, a test holds the two together) plus room for the
request line: a head the middleware would accept is never refused here.  Bodies are h11's
to stream, never to buffer; each route caps what it reads (``api.body``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEADER_BYTES = 16 * 1024  # api.middleware's: the same figure, held together by a test
MAX_REQUEST_LINE_BYTES = 8 * 1024  # a path and query string; ours are far shorter
MAX_REQUEST_HEAD_BYTES = MAX_HEADER_BYTES + MAX_REQUEST_LINE_BYTES


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, answering a head over the limit with a 431 problem."""

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this from its ``except h11.RemoteProtocolError`` block, so the
        # error being handled says which refusal it is; h11 hints 431 for a head that
        # outgrew max_incomplete_event_size.
        error = sys.exc_info()[1]
        if isinstance(error, h11.RemoteProtocolError) and error.error_status_hint == 431:
            self._send_head_too_large()
            return
        super().send_400_response(msg)

    def _send_head_too_large(self) -> None:
        detail = (
            f"The request line and headers must be at most {MAX_REQUEST_HEAD_BYTES} bytes "
            f"(headers at most {MAX_HEADER_BYTES} in total)."
        )
        # The API's problem document (api.problems), written out: no app runs here.
        problem = {
            "type": "https://payorch.dev/problems/request-header-too-large",
            "title": "The request headers are too large",
            "status": 431,
            "detail": detail,
        }
        body = json.dumps(problem).encode()
        headers = [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(
                status_code=431, headers=headers, reason=b"Request Header Fields Too Large"
            ),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            output = self.conn.send(event)
            if output:
                self.transport.write(output)
        self.transport.close()


def server_options() -> dict[str, Any]:
    """The uvicorn options every ``payorch api`` server process uses."""
    return {
        "http": LimitedH11Protocol,
        "h11_max_incomplete_event_size": MAX_REQUEST_HEAD_BYTES,
    }
