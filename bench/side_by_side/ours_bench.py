#!/usr/bin/env python3
"""Streaming benchmark of chatplatform through its public contract (shared/DESIGN.md §6-7).

Same metrics as owui_bench.py (see benchlib.py). Flow per run of C concurrent chats:
  POST /api/v1/auth/token/ {username, password} -> {token}          (once)
  GET  /api/v1/workspaces/                      -> first workspace   (once, or --workspace)
  POST /api/v1/threads/ {workspace, title, provider: "openai", model: "bench-n<N>-r<R>"} -> {id}
  websocket ws://HOST/ws/threads/<id>/  (headers Authorization: Token <t>, Origin: http://HOST)
  send {"type": "message.send", "content": "... [bench:<tag>]"}   <- t_send (TTFT starts)
  events {type, run_id, seq, ...}: run.started, text.delta {delta}, ..., run.completed |
  run.failed | run.cancelled. seq must run 1, 2, 3 ... per run; gaps are counted.
Threads are created and websockets opened before the messages are sent, so the
TTFT overhead covers message.send -> first text.delta only (thread creation time is
reported as create_ms). The C chats belong to one user (``--username``) or, with
``--users-prefix P``, to C users P01, P02, … (same password; as a team of C people chats:
Open WebUI's baseline used one user per chat too); one thread and socket each.

The platform must be started with OPENAI_BASE_URL=http://127.0.0.1:<upstream port>/v1,
OPENAI_API_KEY=<anything> and OPENAI_MODEL=bench-n1000-r50 (the upstream reads N and R
from the model name; if the platform sends another model name, start upstream.py with
--n/--r instead). --server-pids should list every product process root (ASGI server,
Celery workers; add redis-server if it serves only the product), or the process
listening on --base's port is used.

Example:
  python ours_bench.py --base http://127.0.0.1:8000 --username bench --password ... \
      --upstream-log /tmp/bench-upstream.jsonl --points 1x1000x50,10x1000x0 --repeat 3 \
      --server-pids 1234,1300
"""

import argparse
import asyncio
import json
import uuid

import aiohttp
import benchlib as bl
from websockets.asyncio.client import connect

TERMINAL = ('run.completed', 'run.failed', 'run.cancelled')


class Api:
    def __init__(self, base: str, http: aiohttp.ClientSession):
        self.base = base.rstrip('/')
        self.http = http
        self.token = None

    async def call(self, method: str, path: str, body=None, ok=(200, 201, 202)):
        headers = {'Authorization': f'Token {self.token}'} if self.token else {}
        async with self.http.request(method, self.base + path, json=body, headers=headers) as resp:
            text = await resp.text()
            if resp.status not in ok:
                raise RuntimeError(f'{method} {path} -> {resp.status}: {text[:300]}')
            return json.loads(text) if text else None

    async def login(self, username: str, password: str) -> None:
        self.token = (await self.call('POST', '/api/v1/auth/token/',
                                      {'username': username, 'password': password}))['token']

    async def workspace(self) -> str:
        data = await self.call('GET', '/api/v1/workspaces/')
        items = data.get('results', data) if isinstance(data, dict) else data
        if not items:
            raise SystemExit('the user has no workspace')
        first = items[0]
        ws = first.get('workspace', first)
        return ws['id'] if isinstance(ws, dict) else ws


def answer_event(obj: dict):
    """Map a contract event to a benchlib answer event."""
    typ = obj.get('type')
    if typ == 'text.delta':
        return ('delta', obj.get('delta') or '')
    if typ == 'run.completed':
        return ('done', None)
    if typ in ('run.failed', 'run.cancelled', 'error'):
        return ('error', f'{typ}: ' + json.dumps(obj.get('error') or obj.get('message') or obj.get('status'))[:300])
    return None


class ThreadSocket:
    """One open thread page: a websocket whose raw frames are timestamped as read."""

    def __init__(self, api: Api, ws_base: str, origin: str, compress: bool):
        self.api, self.ws_base, self.origin, self.compress = api, ws_base, origin, compress
        self.ws = None

    async def open(self, workspace: str, model: str, title: str) -> float:
        t0 = bl.now_ns()
        th = await self.api.call('POST', '/api/v1/threads/',
                                 {'workspace': workspace, 'title': title, 'provider': 'openai', 'model': model})
        self.thread_id = th['id']
        create_ms = (bl.now_ns() - t0) / 1e6
        self.ws = await connect(f'{self.ws_base}/ws/threads/{self.thread_id}/',
                                additional_headers={'Authorization': f'Token {self.api.token}'},
                                origin=self.origin, compression='deflate' if self.compress else None,
                                max_size=None)
        self.sock = self.ws.transport.get_extra_info('socket')
        return create_ms

    async def chat(self, n: int, tag: str, timeout: float) -> bl.ChatTrace:
        trace = bl.ChatTrace(tag=tag, n_expected=n)
        raw: list[tuple[int, str]] = []
        w0 = bl.tcp_bytes_received(self.sock)
        last_seq: dict = {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            trace.t_send_ns = bl.now_ns()
            await self.ws.send(json.dumps({'type': 'message.send', 'content': f'Benchmark prompt [bench:{tag}]'}))
            while True:
                msg = await asyncio.wait_for(self.ws.recv(), max(0.1, deadline - loop.time()))
                t = bl.now_ns()
                raw.append((t, msg))
                obj = json.loads(msg)
                typ = obj.get('type')
                run_id, seq = obj.get('run_id'), obj.get('seq')
                if run_id is not None and isinstance(seq, int):
                    if seq != last_seq.get(run_id, 0) + 1:
                        trace.seq_gaps += 1
                    last_seq[run_id] = seq
                if typ == 'run.started' and not trace.t_accepted_ns:
                    trace.t_accepted_ns = t
                if typ in TERMINAL or (typ == 'error' and not last_seq):
                    trace.t_done_ns = t
                    break
        except TimeoutError:
            trace.error = f'timeout after {timeout:.0f}s'
        except Exception as e:
            trace.error = f'{type(e).__name__}: {e}'[:300]
        w1 = bl.tcp_bytes_received(self.sock)
        trace.wire_bytes = None if w0 is None or w1 is None else w1 - w0
        for t, msg in raw:
            data = msg.encode() if isinstance(msg, str) else msg
            try:
                ev = answer_event(json.loads(data))
            except ValueError:
                ev = None
            trace.frames.append(bl.Frame(t, len(data), ev))
        return trace

    async def close(self):
        if self.ws is not None:
            await self.ws.close()


async def main_async(args):
    points = bl.parse_points(args.points)
    server_pids = bl.resolve_pids(args.server_pids, bl.port_of(args.base))
    upstream_pids = bl.resolve_pids('', bl.port_of(args.upstream_url))
    print(f'server pids {server_pids} (trees sampled), upstream pids {upstream_pids}', flush=True)
    service_pids = bl.resolve_pids(args.service_pids, 0) if args.service_pids else []
    cpu = bl.CpuSampler(server_pids, upstream_pids, service_pids)
    ws_base = args.base.replace('http://', 'ws://').replace('https://', 'wss://').rstrip('/')
    origin = args.origin or args.base.rstrip('/')

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    # Idle pooled connections are dropped after 2 s, before the server's keep-alive timeout
    # (uvicorn: 5 s). With aiohttp's 15 s a request between points could go out on a
    # connection the server was closing that moment: "ServerDisconnectedError" on a POST.
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        api = Api(args.base, http)
        await api.login(args.username, args.password)
        workspace = args.workspace or await api.workspace()
        apis: dict[int, Api] = {}  # chat index -> its user's session (--users-prefix)

        async def api_for(i: int) -> Api:
            if not getattr(args, 'users_prefix', ''):
                return api
            if i not in apis:
                apis[i] = Api(args.base, http)
                await apis[i].login(f'{args.users_prefix}{i + 1:02d}', args.password)
            return apis[i]
        uplog = bl.UpstreamLog(args.upstream_log)

        async def run(c, n, r, k):
            model = f'bench-n{n}-r{r:g}'
            timeout_s = (n / r if r else n / 50) + args.timeout_extra
            users = await asyncio.gather(*(api_for(i) for i in range(c)))
            socks = [ThreadSocket(u, ws_base, origin, not args.no_ws_compress) for u in users]
            try:
                create_ms = await asyncio.gather(*(s.open(workspace, model, f'bench {model} #{i}')
                                                   for i, s in enumerate(socks)))
                run_id = uuid.uuid4().hex[:8]
                uplog.mark()
                print(f'sending C={c} N={n} R={r:g}', flush=True)  # a mark for profilers (py-spy)
                cpu.start()
                traces = await asyncio.gather(*(s.chat(n, f'{run_id}-{i:02d}', timeout_s)
                                                for i, s in enumerate(socks)))
                await asyncio.sleep(args.settle)
                cpu_s = cpu.stop()
            finally:
                await asyncio.gather(*(s.close() for s in socks), return_exceptions=True)
            meta = {'product': 'chatplatform', 'label': args.label, 'run': k, 'c': c, 'n': n, 'r': r,
                    'create_ms_p50': bl.pct(list(create_ms), 50)}
            return bl.analyze_run(list(traces), uplog.read_new(), cpu_s, meta)

        if args.warmup:
            print(bl.summary_line('warmup', bl.median_runs([await run(min(2, points[0][0]), 20, 0.0, 'warmup')])),
                  flush=True)
        await bl.run_matrix(points, args.repeat, run, 'chatplatform', args.label, args.out, args.version, args.pause,
                            cpu, args.idle_probe)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--base', default='http://127.0.0.1:8000', help='chatplatform base URL')
    ap.add_argument('--origin', default='', help='Origin header for the websocket (default: --base)')
    ap.add_argument('--username', required=True)
    ap.add_argument('--password', required=True)
    ap.add_argument('--workspace', default='', help='workspace id (default: the first one listed)')
    ap.add_argument('--users-prefix', default='',
                    help='chat i belongs to user <prefix><i+1:02d> (same password, member of the workspace)')
    ap.add_argument('--upstream-url', default='http://127.0.0.1:8990/v1', help='to find the upstream PID by port')
    ap.add_argument('--upstream-log', default='/tmp/bench-upstream.jsonl')
    ap.add_argument('--points', default='1x1000x50', help='comma list of CxNxR (chats x tokens x tokens/s, 0 = max)')
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--label', default='default')
    ap.add_argument('--version', default=None, help='product version/commit to store with results')
    ap.add_argument('--out', default='/tmp/ours-bench-results.jsonl')
    ap.add_argument('--server-pids', default='', help='comma list of product root PIDs (trees are sampled)')
    ap.add_argument('--service-pids', default='',
                    help='comma list of shared back-end PIDs (redis-server, postmaster): CPU reported as services_s')
    ap.add_argument('--settle', type=float, default=1.0)
    ap.add_argument('--pause', type=float, default=1.0)
    ap.add_argument('--timeout-extra', type=float, default=120.0)
    ap.add_argument('--idle-probe', type=float, default=5.0,
                    help='seconds of idle CPU sampling before each point (0 = off); gives cpu_s_per_1k_tokens_net')
    ap.add_argument('--no-warmup', dest='warmup', action='store_false')
    ap.add_argument('--no-ws-compress', action='store_true', help='do not offer permessage-deflate')
    args = ap.parse_args()
    asyncio.run(main_async(args))


if __name__ == '__main__':
    main()
