#!/usr/bin/env python3
"""Fake OpenAI-compatible streaming upstream for the chat-streaming benchmarks.

Serves on loopback:
  GET  /health                -> {"status": "ok"}
  GET  /v1/models             -> OpenAI model list (the names in --models)
  POST /v1/chat/completions   -> stream=true: SSE `chat.completion.chunk` events, one
                                 token per event; stream=false: one chat.completion.

Token i (0-based) of an answer is the text "t%05d " (e.g. "t00042 "), so a client can
tell every token apart and spot lost, duplicated or reordered ones.

N (tokens per answer) and R (tokens per second, 0 = as fast as possible) come from
the model name "bench-n<N>-r<R>" (e.g. "bench-n1000-r50", "bench-n5000-r0"); any other
model name uses the --n/--r defaults. Token i is due at start + i/R seconds (absolute
schedule, so no drift); with R=0 tokens are written back to back, yielding to the event
loop after each one so concurrent streams are served fairly.

For every request one JSON line is appended to --log when the response ends:
  {"id", "tag", "model", "n", "r", "stream", "t_req_ns", "t_start_ns", "emit_ns": [...],
   "t_end_ns", "completed", "n_messages", "has_tools", "peer"}
All times are time.clock_gettime_ns(CLOCK_MONOTONIC) nanoseconds, comparable between
processes on one Linux host. emit_ns[i] is taken just before token i is written to the
socket. "tag" is the last "[bench:<tag>]" found in the request's messages (the bench
clients put one in each user message), or null.

Only the standard library and aiohttp are used. Binds 127.0.0.1 by default.
"""

import argparse
import asyncio
import json
import re
import time
import uuid

from aiohttp import web

MODEL_RE = re.compile(r'^bench-n(\d+)-r(\d+(?:\.\d+)?)$')
TAG_RE = re.compile(r'\[bench:([A-Za-z0-9_.:-]+)\]')
DEFAULT_MODELS = 'bench-n1000-r50,bench-n1000-r0,bench-n5000-r0,bench-n100-r0,bench-n20-r0'


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def token_text(i: int) -> str:
    return f't{i:05d} '


def parse_model(model: str, default_n: int, default_r: float) -> tuple[int, float]:
    """Return (N tokens, R tokens/s) for a model name; R=0 means unthrottled."""
    m = MODEL_RE.match(model or '')
    if m:
        return int(m.group(1)), float(m.group(2))
    return default_n, default_r


def find_tag(messages) -> str | None:
    """Return the last [bench:<tag>] in the messages' text (string or content parts)."""
    tag = None
    for msg in messages or []:
        content = msg.get('content') if isinstance(msg, dict) else None
        texts = []
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(p.get('text', '') for p in content if isinstance(p, dict))
        for text in texts:
            for m in TAG_RE.finditer(text or ''):
                tag = m.group(1)
    return tag


class Upstream:
    def __init__(self, args):
        self.args = args
        self.models = [m for m in args.models.split(',') if m]
        self.log = open(args.log, 'a', buffering=1) if args.log else None
        self.active = 0

    def write_record(self, rec: dict) -> None:
        if self.log:
            self.log.write(json.dumps(rec, separators=(',', ':')) + '\n')

    async def health(self, request):
        return web.json_response({'status': 'ok', 'active': self.active})

    async def list_models(self, request):
        created = int(time.time())
        data = [{'id': m, 'object': 'model', 'created': created, 'owned_by': 'bench'} for m in self.models]
        return web.json_response({'object': 'list', 'data': data})

    async def chat_completions(self, request):
        t_req = now_ns()
        try:
            body = await request.json()
        except Exception:
            return web.json_response({'error': {'message': 'invalid JSON body', 'type': 'invalid_request_error'}},
                                     status=400)
        model = body.get('model') or 'bench'
        n, r = parse_model(model, self.args.n, self.args.r)
        messages = body.get('messages') or []
        rec = {
            'id': 'chatcmpl-' + uuid.uuid4().hex[:24],
            'tag': find_tag(messages),
            'model': model,
            'n': n,
            'r': r,
            'stream': bool(body.get('stream')),
            't_req_ns': t_req,
            't_start_ns': None,
            'emit_ns': [],
            't_end_ns': None,
            'completed': False,
            'n_messages': len(messages),
            'has_tools': bool(body.get('tools')),
            'peer': request.remote,
        }
        created = int(time.time())
        self.active += 1
        try:
            if not rec['stream']:
                text = ''.join(token_text(i) for i in range(n))
                rec['t_start_ns'] = now_ns()
                rec['completed'] = True
                rec['t_end_ns'] = now_ns()
                return web.json_response({
                    'id': rec['id'], 'object': 'chat.completion', 'created': created, 'model': model,
                    'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': text},
                                 'finish_reason': 'stop'}],
                    'usage': {'prompt_tokens': 1, 'completion_tokens': n, 'total_tokens': n + 1},
                })
            return await self._stream(request, body, rec, n, r, created)
        finally:
            self.active -= 1
            if rec['t_end_ns'] is None:
                rec['t_end_ns'] = now_ns()
            self.write_record(rec)

    async def _stream(self, request, body, rec, n, r, created):
        resp = web.StreamResponse(headers={'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache'})
        await resp.prepare(request)
        model = rec['model']

        def chunk(delta: dict, finish=None) -> bytes:
            obj = {'id': rec['id'], 'object': 'chat.completion.chunk', 'created': created, 'model': model,
                   'choices': [{'index': 0, 'delta': delta, 'finish_reason': finish}]}
            return b'data: ' + json.dumps(obj, separators=(',', ':')).encode() + b'\n\n'

        loop = asyncio.get_running_loop()
        emit = rec['emit_ns']
        try:
            await resp.write(chunk({'role': 'assistant', 'content': ''}))
            rec['t_start_ns'] = now_ns()
            t0 = loop.time()
            for i in range(n):
                if r > 0:
                    delay = t0 + i / r - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                else:
                    await asyncio.sleep(0)
                data = chunk({'content': token_text(i)})
                emit.append(now_ns())
                await resp.write(data)
            await resp.write(chunk({}, 'stop'))
            if (body.get('stream_options') or {}).get('include_usage'):
                usage = {'id': rec['id'], 'object': 'chat.completion.chunk', 'created': created, 'model': model,
                         'choices': [],
                         'usage': {'prompt_tokens': 1, 'completion_tokens': n, 'total_tokens': n + 1}}
                await resp.write(b'data: ' + json.dumps(usage, separators=(',', ':')).encode() + b'\n\n')
            await resp.write(b'data: [DONE]\n\n')
            await resp.write_eof()
            rec['completed'] = True
        except (ConnectionResetError, asyncio.CancelledError):
            rec['completed'] = False
            raise
        finally:
            rec['t_end_ns'] = now_ns()
        return resp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--host', default='127.0.0.1')
    ap.add_argument('--port', type=int, default=8990)
    ap.add_argument('--log', default='/tmp/bench-upstream.jsonl', help='JSONL file of per-request emit times')
    ap.add_argument('--n', type=int, default=1000, help='tokens per answer when the model name does not say')
    ap.add_argument('--r', type=float, default=50.0, help='tokens/s when the model name does not say (0 = max)')
    ap.add_argument('--models', default=DEFAULT_MODELS, help='comma-separated ids listed by /v1/models')
    args = ap.parse_args()

    up = Upstream(args)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get('/health', up.health)
    app.router.add_get('/v1/models', up.list_models)
    app.router.add_post('/v1/chat/completions', up.chat_completions)
    app.router.add_post('/chat/completions', up.chat_completions)
    print(f'upstream listening on http://{args.host}:{args.port}/v1 log={args.log}', flush=True)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == '__main__':
    main()
