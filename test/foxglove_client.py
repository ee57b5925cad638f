"""A minimal Foxglove WebSocket protocol client for the tests.

foxglove-sdk 0.30.3 accepts only the subprotocol ``foxglove.sdk.v1`` (the ws-protocol formerly named
``foxglove.websocket.v1``, same ops and frames; a client offering only the old name gets HTTP 400), so
the client offers both, as the Foxglove app does.

What Foxglove itself does on connecting: read serverInfo and advertise (JSON text frames), send
subscribe, then read binary messageData frames: opcode 0x01, uint32 subscription id, uint64 log time
(ns), then the message bytes (here CDR, decoded with rclpy against the advertised schema name).
"""
from __future__ import annotations

import asyncio
import json
import struct
import time

import websockets

SUBPROTOCOLS = ["foxglove.sdk.v1", "foxglove.websocket.v1"]
MESSAGE_DATA = 0x01


async def _collect(url: str, topics: dict[str, int], timeout: float) -> tuple[dict, dict, dict[str, list[bytes]]]:
    """Connect, subscribe to ``topics`` (topic -> how many messages to wait for) and return
    (serverInfo, {topic: advertised channel}, {topic: [payloads]})."""
    async with websockets.connect(url, subprotocols=SUBPROTOCOLS, max_size=None) as ws:
        info, channels, got = None, {}, {t: [] for t in topics}
        by_sub: dict[int, str] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (info is None or any(len(got[t]) < n for t, n in topics.items())):
            try:
                frame = await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
            if isinstance(frame, str):
                msg = json.loads(frame)
                if msg["op"] == "serverInfo":
                    info = msg
                elif msg["op"] == "advertise":
                    subs = []
                    for ch in msg["channels"]:
                        channels[ch["topic"]] = ch
                        if ch["topic"] in topics:
                            sub_id = len(by_sub) + 1
                            by_sub[sub_id] = ch["topic"]
                            subs.append({"id": sub_id, "channelId": ch["id"]})
                    if subs:
                        await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
            elif frame[0] == MESSAGE_DATA:
                sub_id, _log_time = struct.unpack_from("<IQ", frame, 1)
                got[by_sub[sub_id]].append(bytes(frame[13:]))
        return info or {}, channels, got


def collect(url: str, topics: dict[str, int], timeout: float = 8.0):
    return asyncio.run(_collect(url, topics, timeout))


async def _touch(url: str) -> str:
    async with websockets.connect(url, subprotocols=SUBPROTOCOLS) as ws:
        return json.loads(await ws.recv())["op"]


def connect_and_leave(url: str) -> str:
    """Connect, read the first frame (serverInfo) and disconnect at once."""
    return asyncio.run(_touch(url))
