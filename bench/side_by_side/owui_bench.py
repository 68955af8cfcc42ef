#!/usr/bin/env python3
"""Streaming benchmark of Open WebUI, driven the way its web UI drives it.

Flow (read from open-webui 0.12.4: backend/open_webui/main.py `chat_completion`,
socket/main.py, routers/auths.py, routers/openai.py, routers/tasks.py, and the
compiled SvelteKit chat page that builds the request):

 1. POST /api/v1/auths/signup   first user -> admin + token (or sign in / cached token)
    POST /api/v1/auths/add      one more admin per concurrent chat (role admin, so raw
                                connection models need no access grant)
 2. POST /openai/config/update  one OpenAI connection: the fake upstream, any key
    POST /ollama/config/update  Ollama off
    POST /api/v1/tasks/config/update  title, tags, follow-ups, autocomplete, search and
                                retrieval query generation off
 3. per user, one Socket.IO client like a browser tab: path /ws/socket.io, websocket
    transport, auth {token}; then emit "user-join" {auth: {token}}. Open WebUI pushes a
    chat's events to room user:<id> as "events" {chat_id, message_id, data: {type, data}}.
 4. per chat: POST /api/chat/completions with the browser's body for a new chat
    (stream, model, model_item, params, features, variables, session_id = socket sid,
    id = assistant message id, parent_id null, user_message, background_tasks all off).
    It answers {status, task_ids, chat_id} at once; tokens then arrive on the socket as
    "response:completion" events ({type: response.output_text.delta, delta}) and the end
    as "chat:completion" {done: true, output}. When the POST answers, emit "events:chat"
    {chat_id, data: {type: join}} as the browser does on moving to /c/<id>.

Each user socket's raw websocket frames are timestamped as they are read (the receive()
of the aiohttp websocket is wrapped), and parsed after the run; see benchlib.py for the
metrics. C chats of one run start together, one per user.

Example (upstream.py on :8990, Open WebUI on :8081):
  python owui_bench.py --base http://127.0.0.1:8081 --upstream http://127.0.0.1:8990/v1 \
      --upstream-log /tmp/bench-upstream.jsonl --points 1x1000x50,10x1000x0 --repeat 3
"""

import argparse
import asyncio
import datetime
import json
import sys
import time
import uuid

import aiohttp
import benchlib as bl
import socketio

TASK_FLAGS_OFF = ['ENABLE_TITLE_GENERATION', 'ENABLE_TAGS_GENERATION', 'ENABLE_FOLLOW_UP_GENERATION',
                  'ENABLE_AUTOCOMPLETE_GENERATION', 'ENABLE_SEARCH_QUERY_GENERATION',
                  'ENABLE_RETRIEVAL_QUERY_GENERATION']
PASSWORD = 'Bench-pass-1234'


class Api:
    """Thin JSON client for the Open WebUI REST API."""

    def __init__(self, base: str, http: aiohttp.ClientSession):
        self.base = base.rstrip('/')
        self.http = http

    async def call(self, method: str, path: str, token: str | None = None, body=None, ok=(200,)):
        headers = {'Authorization': f'Bearer {token}'} if token else {}
        async with self.http.request(method, self.base + path, json=body, headers=headers) as resp:
            text = await resp.text()
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = text
            if resp.status not in ok:
                raise RuntimeError(f'{method} {path} -> {resp.status}: {text[:300]}')
            return data

    async def valid(self, token: str | None) -> bool:
        if not token:
            return False
        try:
            await self.call('GET', '/api/v1/auths/', token)
            return True
        except RuntimeError:
            return False


# ----------------------------------------------------------------------- set-up

def load_state(path: str, base: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f).get(base, {})
    except (OSError, ValueError):
        return {}


def save_state(path: str, base: str, state: dict) -> None:
    try:
        with open(path) as f:
            allst = json.load(f)
    except (OSError, ValueError):
        allst = {}
    allst[base] = state
    with open(path, 'w') as f:
        json.dump(allst, f)


async def ensure_users(api: Api, count: int, state: dict) -> list[dict]:
    """Admin (first sign-up) plus `count` chat users; tokens cached in `state`."""
    admin = state.get('admin') or {'name': 'Bench Admin', 'email': 'bench-admin@example.com'}
    if not await api.valid(admin.get('token')):
        try:
            r = await api.call('POST', '/api/v1/auths/signin', body={'email': admin['email'], 'password': PASSWORD})
        except RuntimeError:
            r = await api.call('POST', '/api/v1/auths/signup',
                               body={'name': admin['name'], 'email': admin['email'], 'password': PASSWORD})
        admin.update(token=r['token'], id=r['id'])
    state['admin'] = admin
    users = state.get('users') or []
    for i in range(count):
        if i < len(users) and await api.valid(users[i].get('token')):
            continue
        u = {'name': f'Bench User {i:02d}', 'email': f'bench-user-{i:02d}@example.com'}
        try:
            r = await api.call('POST', '/api/v1/auths/signin', body={'email': u['email'], 'password': PASSWORD})
        except RuntimeError:
            r = await api.call('POST', '/api/v1/auths/add', admin['token'],
                               body={**u, 'password': PASSWORD, 'role': 'admin'})
        u.update(token=r['token'], id=r['id'])
        if i < len(users):
            users[i] = u
        else:
            users.append(u)
    state['users'] = users
    return users[:count]


async def configure(api: Api, admin_token: str, upstream: str, key: str) -> dict:
    await api.call('POST', '/openai/config/update', admin_token, body={
        'ENABLE_OPENAI_API': True, 'OPENAI_API_BASE_URLS': [upstream], 'OPENAI_API_KEYS': [key],
        'OPENAI_API_CONFIGS': {}})
    try:
        oc = await api.call('GET', '/ollama/config', admin_token)
        await api.call('POST', '/ollama/config/update', admin_token, body={
            'ENABLE_OLLAMA_API': False, 'OLLAMA_BASE_URLS': oc.get('OLLAMA_BASE_URLS') or [],
            'OLLAMA_API_CONFIGS': oc.get('OLLAMA_API_CONFIGS') or {}})
    except RuntimeError as e:
        print('warning: could not turn Ollama off:', e, file=sys.stderr)
    tc = await api.call('GET', '/api/v1/tasks/config', admin_token)
    for flag in TASK_FLAGS_OFF:
        tc[flag] = False
    tc = await api.call('POST', '/api/v1/tasks/config/update', admin_token, body=tc)
    return {k: tc.get(k) for k in TASK_FLAGS_OFF}


async def model_items(api: Api, token: str) -> dict:
    data = await api.call('GET', '/api/models?refresh=true', token)
    items = data.get('data', data) if isinstance(data, dict) else data
    return {m['id']: m for m in items}


# --------------------------------------------------------------------- sockets

class UserSocket:
    """One browser tab of one user: a Socket.IO client whose raw frames are recorded."""

    def __init__(self, base: str, user: dict, compress: bool):
        self.base = base
        self.user = user
        opts = {'compress': 15} if compress else {}
        self.sio = socketio.AsyncClient(reconnection=False, websocket_extra_options=opts)
        self.frames: list[tuple[int, str]] = []
        self.recording = False
        self.waiters: dict[str, asyncio.Event] = {}
        self.sock = None
        self.compressed = None

    async def connect(self):
        @self.sio.on('events')
        async def on_events(payload):
            try:
                mid = payload.get('message_id')
                d = payload.get('data') or {}
                ev = self.waiters.get(mid)
                if ev is None:
                    return
                dd = d.get('data') or {}
                if (d.get('type') == 'chat:completion' and (dd.get('done') or dd.get('error'))) \
                        or d.get('type') in ('chat:message:error', 'chat:tasks:cancel'):
                    ev.set()
            except Exception:  # never let a parse problem kill the client
                pass

        await self.sio.connect(self.base, socketio_path='/ws/socket.io', transports=['websocket'],
                               auth={'token': self.user['token']}, wait_timeout=20)
        ws = self.sio.eio.ws
        orig = ws.receive
        frames = self.frames

        async def receive(*a, **k):
            msg = await orig(*a, **k)
            if self.recording and msg.type == aiohttp.WSMsgType.TEXT:
                frames.append((bl.now_ns(), msg.data))
            return msg

        ws.receive = receive
        transport = getattr(getattr(ws, '_writer', None), 'transport', None)
        self.sock = transport.get_extra_info('socket') if transport else None
        self.compressed = bool(getattr(ws, '_compress', 0))
        await self.sio.emit('user-join', {'auth': {'token': self.user['token']}})

    def start(self):
        self.frames.clear()
        self.recording = True
        self.wire0 = bl.tcp_bytes_received(self.sock)

    def stop(self):
        self.recording = False
        w1 = bl.tcp_bytes_received(self.sock)
        return None if w1 is None or self.wire0 is None else w1 - self.wire0


def parse_sio(text: str):
    """Decode a Socket.IO EVENT packet ('42[...]') carried in an Engine.IO message."""
    if not text.startswith('42'):
        return None
    i = 2
    if text.startswith('/', i):
        i = text.index(',', i) + 1
    while i < len(text) and text[i].isdigit():
        i += 1
    return json.loads(text[i:])


def output_text(output) -> str:
    parts = []
    for item in output or []:
        if isinstance(item, dict) and item.get('type') == 'message':
            for c in item.get('content') or []:
                if isinstance(c, dict) and c.get('type') == 'output_text':
                    parts.append(c.get('text') or '')
    return ''.join(parts)


def answer_event(obj, message_id: str):
    """Map an Open WebUI 'events' payload to a benchlib answer event, or None."""
    if not isinstance(obj, list) or len(obj) < 2 or obj[0] != 'events' or not isinstance(obj[1], dict):
        return None
    p = obj[1]
    if p.get('message_id') != message_id:
        return None
    d = p.get('data') or {}
    typ, dd = d.get('type'), d.get('data') or {}
    if typ == 'response:completion':
        if dd.get('type') == 'response.output_text.delta':
            return ('delta', dd.get('delta') or '')
        return None
    if typ == 'chat:completion':
        if dd.get('done'):
            return ('done', output_text(dd['output']) if 'output' in dd else dd.get('content'))
        if dd.get('error'):
            return ('error', json.dumps(dd['error'])[:300])
        if 'output' in dd:
            return ('full', output_text(dd['output']))
        if 'content' in dd:
            return ('full', dd['content'])
        return None
    if typ in ('chat:message:delta', 'message'):
        return ('delta', dd.get('content') or '')
    if typ in ('chat:message', 'replace'):
        return ('full', dd.get('content') or '')
    if typ in ('chat:message:error', 'chat:tasks:cancel'):
        return ('error', typ + ' ' + json.dumps(dd)[:300])
    return None


# ------------------------------------------------------------------------ a chat

def browser_variables(user: dict) -> dict:
    now = datetime.datetime.now()
    return {'{{USER_NAME}}': user['name'], '{{USER_EMAIL}}': user['email'], '{{USER_LOCATION}}': 'Unknown',
            '{{CURRENT_DATETIME}}': now.strftime('%Y-%m-%d %H:%M:%S'), '{{CURRENT_DATE}}': now.strftime('%Y-%m-%d'),
            '{{CURRENT_TIME}}': now.strftime('%H:%M:%S'), '{{CURRENT_WEEKDAY}}': now.strftime('%A'),
            '{{CURRENT_TIMEZONE}}': 'UTC', '{{USER_LANGUAGE}}': 'en-US'}


async def run_chat(api: Api, sock: UserSocket, model_item: dict, n: int, tag: str, timeout: float) -> bl.ChatTrace:
    trace = bl.ChatTrace(tag=tag, n_expected=n)
    user = sock.user
    user_msg_id, asst_id = str(uuid.uuid4()), str(uuid.uuid4())
    model = model_item['id']
    body = {
        'stream': True,
        'model': model,
        'params': {'model_controls': {}},
        'tool_servers': [],
        'features': {'voice': False, 'image_generation': False, 'code_interpreter': False, 'web_search': False},
        'variables': browser_variables(user),
        'chat_variables': {},
        'model_item': model_item,
        'session_id': sock.sio.get_sid(),
        'id': asst_id,
        'parent_id': None,
        'user_message': {'id': user_msg_id, 'parentId': None, 'childrenIds': [asst_id], 'role': 'user',
                         'content': f'Benchmark prompt [bench:{tag}]', 'timestamp': int(time.time()),
                         'models': [model]},
        'background_tasks': {'title_generation': False, 'tags_generation': False, 'follow_up_generation': False},
    }
    done = asyncio.Event()
    sock.waiters[asst_id] = done
    trace.info['message_id'] = asst_id
    try:
        trace.t_send_ns = bl.now_ns()
        r = await api.call('POST', '/api/chat/completions', user['token'], body=body)
        trace.t_accepted_ns = bl.now_ns()
        chat_id = (r or {}).get('chat_id')
        trace.info['chat_id'] = chat_id
        if chat_id:
            await sock.sio.emit('events:chat', {'chat_id': chat_id, 'data': {'type': 'join'}})
        await asyncio.wait_for(done.wait(), timeout)
        trace.t_done_ns = bl.now_ns()
    except TimeoutError:
        trace.error = f'timeout after {timeout:.0f}s'
    except Exception as e:
        trace.error = f'{type(e).__name__}: {e}'[:300]
    finally:
        sock.waiters.pop(asst_id, None)
    return trace


# ------------------------------------------------------------------------ runs

async def one_run(api, socks, models, c, n, r, args, uplog, cpu, run_label):
    model = f'bench-n{n}-r{r:g}'
    timeout = (n / r if r else n / 50) + args.timeout_extra
    use = socks[:c]
    uplog.mark()
    for s in use:
        s.start()
    cpu.start()
    run_id = uuid.uuid4().hex[:8]
    traces = await asyncio.gather(*(run_chat(api, s, models[model], n, f'{run_id}-{i:02d}', timeout)
                                    for i, s in enumerate(use)))
    await asyncio.sleep(args.settle)
    cpu_s = cpu.stop()
    if args.dump_frames:
        with open(args.dump_frames, 'a') as f:
            for t, text in use[0].frames:
                f.write(json.dumps({'run': run_label, 'c': c, 'n': n, 'r': r, 't_ns': t, 'len': len(text.encode()),
                                    'frame': text[:args.dump_chars]}) + '\n')
    for s, tr in zip(use, traces, strict=False):
        tr.wire_bytes = s.stop()
        mid = tr.info['message_id']
        for t, text in s.frames:
            try:
                ev = answer_event(parse_sio(text), mid)
            except (ValueError, IndexError):
                ev = None
            tr.frames.append(bl.Frame(t, len(text.encode()), ev))
        s.frames.clear()
    meta = {'product': 'open-webui', 'label': args.label, 'run': run_label, 'c': c, 'n': n, 'r': r,
            'ws_compressed': all(s.compressed for s in use)}
    return bl.analyze_run(list(traces), uplog.read_new(), cpu_s, meta)


async def main_async(args):
    points = bl.parse_points(args.points)
    max_c = max(c for c, _, _ in points)
    server_pids = bl.resolve_pids(args.server_pids, bl.port_of(args.base))
    upstream_pids = bl.resolve_pids('', bl.port_of(args.upstream))
    print(f'server pids {server_pids} (trees sampled), upstream pids {upstream_pids}', flush=True)
    cpu = bl.CpuSampler(server_pids, upstream_pids)

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
        api = Api(args.base, http)
        version = (await api.call('GET', '/api/version')).get('version')
        state = load_state(args.state, args.base)
        users = await ensure_users(api, max_c, state)
        save_state(args.state, args.base, state)
        tasks_cfg = await configure(api, state['admin']['token'], args.upstream, args.api_key)
        models = await model_items(api, users[0]['token'])
        print(f'open-webui {version}; task flags {tasks_cfg}; models {sorted(models)}', flush=True)
        missing = {f'bench-n{n}-r{r:g}' for _, n, r in points} - set(models)
        if missing:
            raise SystemExit(f'models {sorted(missing)} not offered; start upstream.py with --models including them')

        socks = [UserSocket(args.base, u, not args.no_ws_compress) for u in users]
        try:
            for s in socks:
                await s.connect()
            print(f'{len(socks)} sockets connected; permessage-deflate: {socks[0].compressed}', flush=True)
            uplog = bl.UpstreamLog(args.upstream_log)

            async def run(c, n, r, k):
                return await one_run(api, socks, models, c, n, r, args, uplog, cpu, k)

            if args.warmup and 'bench-n20-r0' in models:
                w = await run(min(max_c, 2), 20, 0.0, 'warmup')
                print(bl.summary_line('warmup', bl.median_runs([w])), flush=True)
            await bl.run_matrix(points, args.repeat, run, 'open-webui', args.label, args.out, version, args.pause,
                                cpu, args.idle_probe)
        finally:
            for s in socks:
                if s.sio.connected:
                    await s.sio.disconnect()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--base', default='http://127.0.0.1:8081', help='Open WebUI base URL')
    ap.add_argument('--upstream', default='http://127.0.0.1:8990/v1', help='fake upstream base URL (as Open WebUI sees it)')
    ap.add_argument('--api-key', default='sk-bench')
    ap.add_argument('--upstream-log', default='/tmp/bench-upstream.jsonl')
    ap.add_argument('--points', default='1x1000x50', help='comma list of CxNxR (chats x tokens x tokens/s, 0 = max)')
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--label', default='default', help='name of the server configuration, stored with results')
    ap.add_argument('--out', default='/tmp/owui-bench-results.jsonl', help='append per-run JSON lines here')
    ap.add_argument('--state', default='/tmp/owui-bench-state.json', help='cached users and tokens')
    ap.add_argument('--server-pids', default='', help='comma list of root PIDs to charge CPU to (default: the '
                                                      'process listening on --base port, with its children)')
    ap.add_argument('--settle', type=float, default=1.0, help='seconds after the last answer before CPU is read')
    ap.add_argument('--pause', type=float, default=1.0, help='seconds between runs')
    ap.add_argument('--timeout-extra', type=float, default=120.0, help='per-chat timeout beyond N/R seconds')
    ap.add_argument('--idle-probe', type=float, default=5.0,
                    help='seconds of idle CPU sampling before each point (0 = off); gives cpu_s_per_1k_tokens_net')
    ap.add_argument('--no-warmup', dest='warmup', action='store_false')
    ap.add_argument('--dump-frames', default='', help='append the first chat\'s raw frames of each run here (debug)')
    ap.add_argument('--dump-chars', type=int, default=400, help='characters kept per dumped frame')
    ap.add_argument('--no-ws-compress', action='store_true',
                    help='do not offer permessage-deflate (browsers offer it)')
    args = ap.parse_args()
    asyncio.run(main_async(args))


if __name__ == '__main__':
    main()
