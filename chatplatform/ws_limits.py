"""The websocket hard limit closes cleanly with 1009, as the contract says.

daphne enforces its frame/message limit (1 MiB, ``websocket_max_message_size``) through
autobahn, whose server factory by default *drops the TCP connection* on a protocol
violation ("fail by drop"): the client then sees an abnormal closure (1006) and cannot tell
"too big" from a network failure. With ``failByDrop`` off autobahn performs the closing
handshake with the code of the violation — 1009 (message too big) here — and still drops
the connection if the client does not answer within its close-handshake timeout.

daphne does not expose the option, so :func:`close_cleanly_on_violations` sets it on
daphne's factory class when the ASGI application is loaded (``config/asgi.py``).
"""

from __future__ import annotations


def close_cleanly_on_violations() -> bool:
    """Make daphne's websocket factory close with a code instead of dropping; False when
    daphne is not installed (another ASGI server enforces its own limits)."""
    try:
        from daphne.ws_protocol import WebSocketFactory
    except ImportError:
        return False
    if getattr(WebSocketFactory, "_chatplatform_clean_close", False):
        return True
    reset = WebSocketFactory.resetProtocolOptions

    def reset_protocol_options(self) -> None:
        reset(self)
        self.failByDrop = False

    WebSocketFactory.resetProtocolOptions = reset_protocol_options
    WebSocketFactory._chatplatform_clean_close = True
    return True
