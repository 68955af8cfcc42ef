"""Shared measurement code for the streaming benchmarks (owui_bench.py, ours_bench.py).

A bench client records, per chat, every frame it receives on its push channel
(Socket.IO or websocket) as a `Frame(t_ns, nbytes, event)`, where `event` is what the
product-specific parser made of it:

  ('delta', text)   text appended to the answer
  ('full', text)    the whole answer so far (replaces the text)
  ('done', text)    the stream finished; text is the final answer or None
  ('error', msg)    the product reported a failure
  None              a frame that is not part of the answer (keep-alives, status, ...)

`analyze_run()` turns those traces plus the fake upstream's JSONL log (upstream.py)
into the metrics below. Times are CLOCK_MONOTONIC nanoseconds, comparable with the
upstream's because both run on one Linux host.

Metrics (per run; `median_runs()` takes the median of each over repeats):
  latency_ms p50/p99/max  added latency per token: first time the client saw token i
                          minus the upstream's emit time of token i, over all tokens
                          of all chats; latency_ms_p99_by_5s / _by_1s: the p99 of the
                          tokens emitted in each 5 s / 1 s since the first request (where a
                          run's tail happens: the burst of set-ups, the steady state, the
                          ends); t0_unix: that first request on the wall clock
  ttft_overhead_ms        client time-to-first-token (first token seen - request sent)
                          minus the upstream's own (first emit - request arrival)
  pre_upstream_ms         request sent by the client -> request arrives upstream
  tokens_per_s            distinct tokens delivered, all chats, / (last token seen -
                          first request sent)
  cpu_s_per_1k_tokens     CPU seconds (user+sys) of the product's process trees during
                          the run, per 1000 delivered tokens
  payload_bytes_per_1k    application bytes (decompressed frame payloads) received by
                          the client per 1000 tokens; by_quintile splits the answer into
                          fifths by token position (grows along the answer if the product
                          re-sends the accumulated message); wire_bytes_per_1k is what
                          TCP delivered (after permessage-deflate, if negotiated)
  lost / duplicated / reordered  from the token markers in the live stream (text before
                          any final snapshot), chats that failed outright excluded;
                          must all be 0. chats_failed / missing_in_failed_chats count the
                          requests the product rejected or never finished.
"""

import json
import math
import os
import re
import socket
import statistics
import struct
import time
from dataclasses import dataclass, field

CLOCK = time.CLOCK_MONOTONIC
MARKER_RE = re.compile(r't(\d{5})(?!\d)')
_OVERLAP = 7  # len('t00000 '): how far back to rescan so split markers are found


def now_ns() -> int:
    return time.clock_gettime_ns(CLOCK)


# --------------------------------------------------------------------------- traces

@dataclass
class Frame:
    t_ns: int
    nbytes: int
    event: tuple | None


@dataclass
class ChatTrace:
    """Everything one chat of one run produced on the client side."""
    tag: str
    n_expected: int
    t_send_ns: int = 0          # request (HTTP POST or websocket message) handed to the socket
    t_accepted_ns: int = 0      # HTTP response / first reply to the request
    t_done_ns: int = 0          # stream finished (done/completed event seen)
    frames: list = field(default_factory=list)
    wire_bytes: int | None = None
    error: str | None = None
    seq_gaps: int = 0           # products with per-event sequence numbers
    info: dict = field(default_factory=dict)


# ---------------------------------------------------------------- upstream JSONL log

class UpstreamLog:
    """Reads the records upstream.py appended to its JSONL log after `mark()`."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = os.path.getsize(self.path) if os.path.exists(self.path) else 0

    def read_new(self) -> list[dict]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, 'rb') as f:
            f.seek(self.offset)
            data = f.read()
        out = []
        for line in data.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out


# ------------------------------------------------------------------ process CPU time

_TICK = os.sysconf('SC_CLK_TCK')


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f'/proc/{pid}/stat') as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(')') + 2:].split()


def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir('/proc'):
        if name.isdigit():
            st = _stat_fields(int(name))
            if st:
                kids.setdefault(int(st[1]), []).append(int(name))
    return kids


def process_tree(roots: list[int]) -> list[int]:
    kids = children_map()
    seen, stack = [], list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.append(pid)
        stack.extend(kids.get(pid, []))
    return seen


def process_name(pid: int) -> str:
    """A short name for a product process: the server or worker program in its command line
    (``uvicorn``, ``daphne``, ``celery``, ``haproxy``), else its ``comm``."""
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            argv = [os.path.basename(a.decode(errors='replace')) for a in f.read().split(b'\0') if a]
    except OSError:
        return str(pid)
    for known in ('uvicorn', 'daphne', 'celery', 'haproxy'):
        if known in argv:
            return known
    try:
        with open(f'/proc/{pid}/comm') as f:
            return f.read().strip()
    except OSError:
        return str(pid)


def tree_cpu_seconds(roots: list[int]) -> float:
    """User+system CPU seconds of the processes under `roots` (incl. reaped children)."""
    total = 0
    for pid in process_tree(roots):
        st = _stat_fields(pid)
        if st:
            # fields after ')': state=0 ppid=1 ... utime=11 stime=12 cutime=13 cstime=14
            total += int(st[11]) + int(st[12]) + int(st[13]) + int(st[14])
    return total / _TICK


def pid_listening_on(port: int) -> int | None:
    """PID of the process holding a TCP socket LISTENing on `port` (needs /proc access)."""
    inodes = set()
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if int(parts[1].rsplit(':', 1)[1], 16) == port and parts[3] == '0A':
                        inodes.add(parts[9])
        except OSError:
            pass
    targets = {f'socket:[{i}]' for i in inodes}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            for fd in os.listdir(f'/proc/{name}/fd'):
                if os.readlink(f'/proc/{name}/fd/{fd}') in targets:
                    return int(name)
        except OSError:
            continue
    return None


# ---------------------------------------------------------------- TCP wire bytes

def tcp_bytes_received(sock) -> int | None:
    """tcpi_bytes_received of a connected TCP socket (Linux struct tcp_info, offset 128)."""
    try:
        if sock is None:
            return None
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        if len(info) < 136:
            return None
        return struct.unpack_from('<Q', info, 128)[0]
    except OSError:
        return None


# --------------------------------------------------------------------- statistics

def pct(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def _r(x, nd=2):
    return None if x is None else round(x, nd)


class _Text:
    """Answer text that grows by deltas or is replaced by snapshots."""

    def __init__(self):
        self.chunks: list[str] = []
        self.joined: str | None = ''

    def get(self) -> str:
        if self.joined is None:
            self.joined = ''.join(self.chunks)
            self.chunks = [self.joined]
        return self.joined

    def append(self, s: str) -> str:
        tail, i = '', len(self.chunks) - 1
        while i >= 0 and len(tail) < _OVERLAP:
            tail = self.chunks[i] + tail
            i -= 1
        tail = tail[-_OVERLAP:]
        self.chunks.append(s)
        self.joined = None
        return tail + s

    def replace(self, s: str) -> str:
        old = self.get()
        region = s[max(0, len(old) - _OVERLAP):] if s.startswith(old) else s
        self.chunks = [s]
        self.joined = s
        return region


def analyze_chat(trace: ChatTrace, up: dict | None) -> dict:
    """Per-chat figures; see the module docstring. `up` is the upstream record or None."""
    n = trace.n_expected
    first_seen: dict[int, int] = {}
    text = _Text()
    only_in_final = 0
    quint_bytes = [0] * 5
    tail_bytes = 0
    total_bytes = 0
    n_events = 0
    final_text = None
    pre_done_text = None
    done = False
    for fr in trace.frames:
        total_bytes += fr.nbytes
        seen_before = len(first_seen)
        if seen_before >= n:
            tail_bytes += fr.nbytes
        else:
            quint_bytes[min(4, seen_before * 5 // max(n, 1))] += fr.nbytes
        ev = fr.event
        if not ev:
            continue
        kind, payload = ev
        if kind in ('delta', 'full', 'done') and payload is not None:
            n_events += 1
            if kind == 'done' and pre_done_text is None:
                pre_done_text = text.get()
            region = text.append(payload) if kind == 'delta' else text.replace(payload)
            for m in MARKER_RE.finditer(region):
                k = int(m.group(1))
                if k not in first_seen:
                    first_seen[k] = fr.t_ns
                    if kind == 'done':
                        only_in_final += 1
            if kind == 'done':
                final_text = payload
        if kind == 'done':
            done = True
        elif kind == 'error':
            trace.error = trace.error or str(payload)

    # lost/duplicated/reordered are judged on the live stream (text before a final
    # snapshot); tokens only a final snapshot brought are counted separately.
    streamed = pre_done_text if pre_done_text is not None else text.get()
    seq = [int(m.group(1)) for m in MARKER_RE.finditer(streamed)]
    distinct = set(seq)
    lost = sum(1 for k in range(n) if k not in distinct)
    dup = len(seq) - len(distinct)
    reordered = sum(1 for a, b in zip(seq, seq[1:], strict=False) if b < a)
    unexpected = sum(1 for k in distinct if k >= n)
    visible = {k for k in first_seen if k < n}

    lat_ms, lat_at_ns = [], []
    ttft_client = ttft_up = pre_up = None
    if up and up.get('emit_ns'):
        emit = up['emit_ns']
        for k, t in first_seen.items():
            if k < len(emit):
                lat_ms.append((t - emit[k]) / 1e6)
                lat_at_ns.append(emit[k])
        if up.get('t_req_ns') and trace.t_send_ns:
            pre_up = (up['t_req_ns'] - trace.t_send_ns) / 1e6
        if 0 in first_seen and trace.t_send_ns:
            ttft_client = (first_seen[0] - trace.t_send_ns) / 1e6
            ttft_up = (emit[0] - up['t_req_ns']) / 1e6
    times = sorted(first_seen.values())
    per_chat_tps = None
    if len(times) > 1 and times[-1] > times[0]:
        per_chat_tps = (len(times) - 1) / ((times[-1] - times[0]) / 1e9)
    return {
        'tag': trace.tag,
        'done': done,
        'error': trace.error,
        'delivered': len(visible),
        'lost': lost,
        'duplicated': dup,
        'reordered': reordered,
        'unexpected': unexpected,
        'only_in_final_snapshot': only_in_final,
        'final_matches_stream': None if final_text is None else final_text.strip() == streamed.strip(),
        'latency_ms': lat_ms,
        'latency_at_ns': lat_at_ns,
        'ttft_client_ms': ttft_client,
        'ttft_upstream_ms': ttft_up,
        'ttft_overhead_ms': None if ttft_client is None else ttft_client - ttft_up,
        'pre_upstream_ms': pre_up,
        'first_ns': times[0] if times else None,
        'last_ns': times[-1] if times else None,
        'per_chat_tokens_per_s': per_chat_tps,
        'payload_bytes': total_bytes,
        'wire_bytes': trace.wire_bytes,
        'quintile_bytes': quint_bytes,
        'tail_bytes': tail_bytes,
        'frames': len(trace.frames),
        'answer_events': n_events,
        'seq_gaps': trace.seq_gaps,
    }


def analyze_run(traces: list[ChatTrace], up_records: list[dict], cpu: dict, meta: dict) -> dict:
    """Aggregate one run (C concurrent chats) into the metrics dict printed and saved."""
    by_tag: dict[str, list[dict]] = {}
    for rec in up_records:
        by_tag.setdefault(rec.get('tag') or '', []).append(rec)
    chats = []
    extra_upstream = 0
    for tr in traces:
        recs = [r for r in by_tag.get(tr.tag, []) if r.get('stream')]
        extra_upstream += max(0, len(by_tag.get(tr.tag, [])) - 1)
        up = max(recs, key=lambda r: len(r.get('emit_ns') or [])) if recs else None
        a = analyze_chat(tr, up)
        a['upstream_found'] = up is not None
        chats.append(a)
    untagged = len(by_tag.get('', []))

    lat = [x for a in chats for x in a['latency_ms']]
    delivered = sum(a['delivered'] for a in chats)
    n_total = sum(tr.n_expected for tr in traces)
    t0 = min((tr.t_send_ns for tr in traces if tr.t_send_ns), default=None)
    t1 = max((a['last_ns'] for a in chats if a['last_ns']), default=None)
    wall = (t1 - t0) / 1e9 if t0 and t1 else None
    ttfto = [a['ttft_overhead_ms'] for a in chats if a['ttft_overhead_ms'] is not None]
    preup = [a['pre_upstream_ms'] for a in chats if a['pre_upstream_ms'] is not None]
    pay = sum(a['payload_bytes'] for a in chats)
    wires = [a['wire_bytes'] for a in chats]
    wire = sum(wires) if wires and all(w is not None for w in wires) else None
    ok = [(a, tr) for a, tr in zip(chats, traces, strict=False) if not a['error']]
    q = [sum(a['quintile_bytes'][i] for a, _ in ok) for i in range(5)]
    n_ok = sum(tr.n_expected for _, tr in ok)
    per_k = 1000 / delivered if delivered else None
    server_cpu = cpu.get('server_s')
    res = dict(meta)
    res.update({
        'chats': len(traces),
        'chats_done': sum(1 for a in chats if a['done']),
        'chats_failed': sum(1 for a in chats if a['error']),
        'errors': [a['error'] for a in chats if a['error']][:5],
        'tokens_expected': n_total,
        'tokens_delivered': delivered,
        'lost': sum(a['lost'] for a in chats if not a['error']),
        'missing_in_failed_chats': sum(a['lost'] for a in chats if a['error']),
        'duplicated': sum(a['duplicated'] for a in chats),
        'reordered': sum(a['reordered'] for a in chats),
        'unexpected': sum(a['unexpected'] for a in chats),
        'only_in_final_snapshot': sum(a['only_in_final_snapshot'] for a in chats),
        'final_mismatch': sum(1 for a in chats if a['final_matches_stream'] is False),
        'seq_gaps': sum(a['seq_gaps'] for a in chats),
        'upstream_missing': sum(1 for a in chats if not a['upstream_found']),
        'extra_upstream_requests': extra_upstream + untagged,
        'latency_ms': {'p50': _r(pct(lat, 50)), 'p99': _r(pct(lat, 99)), 'max': _r(max(lat) if lat else None),
                       'min': _r(min(lat) if lat else None)},
        'latency_ms_p99_by_5s': _by_slice(chats, t0, 5.0),
        'latency_ms_p99_by_1s': _by_slice(chats, t0, 1.0),
        't0_unix': _r(time.time() - (now_ns() - t0) / 1e9, 3) if t0 else None,
        'ttft_overhead_ms': {'p50': _r(pct(ttfto, 50)), 'p99': _r(pct(ttfto, 99)),
                             'max': _r(max(ttfto) if ttfto else None)},
        'pre_upstream_ms': {'p50': _r(pct(preup, 50)), 'max': _r(max(preup) if preup else None)},
        'wall_s': _r(wall, 3),
        'tokens_per_s': _r(delivered / wall if wall else None, 1),
        'per_chat_tokens_per_s_p50': _r(pct([a['per_chat_tokens_per_s'] for a in chats
                                              if a['per_chat_tokens_per_s']], 50), 1),
        'cpu_s': {k: v if isinstance(v, dict) else _r(v, 3) for k, v in cpu.items()},
        'cpu_s_per_1k_tokens': _r(server_cpu * per_k if per_k and server_cpu is not None else None, 4),
        'cpu_s_per_1k_tokens_net': _r((server_cpu - cpu['server_idle_s']) * per_k
                                      if per_k and server_cpu is not None and 'server_idle_s' in cpu else None, 4),
        'payload_bytes_per_1k': _r(pay * per_k if per_k else None, 0),
        'payload_bytes_per_1k_by_quintile': [_r(b * 5 * 1000 / n_ok, 0) for b in q] if n_ok else None,
        'tail_bytes_per_chat': _r(statistics.mean([a['tail_bytes'] for a in chats]) if chats else None, 0),
        'wire_bytes_per_1k': _r(wire * per_k if per_k and wire is not None else None, 0),
        'frames_per_chat': _r(statistics.mean([a['frames'] for a in chats]) if chats else None, 1),
        'answer_events_per_chat': _r(statistics.mean([a['answer_events'] for a in chats]) if chats else None, 1),
    })
    return res


def _by_slice(chats: list[dict], t0: int | None, slice_s: float) -> list[float | None]:
    """p99 of the added latency of the tokens the upstream emitted in each ``slice_s`` since
    the first request was sent: where in a run the tail happens (a burst of set-ups at the
    start, or the steady state)."""
    if t0 is None:
        return []
    slices: dict[int, list[float]] = {}
    for a in chats:
        for ms, at in zip(a['latency_ms'], a.get('latency_at_ns', []), strict=False):
            slices.setdefault(max(0, int((at - t0) / 1e9 // slice_s)), []).append(ms)
    return [_r(pct(slices[i], 99)) if i in slices else None for i in range(max(slices, default=-1) + 1)]


# ------------------------------------------------------------------------ repeats

def _flatten(d: dict, prefix='') -> dict:
    out = {}
    for k, v in d.items():
        key = f'{prefix}{k}'
        if isinstance(v, dict):
            out.update(_flatten(v, key + '.'))
        elif isinstance(v, list) and v and all(isinstance(x, (int, float)) or x is None for x in v):
            for i, x in enumerate(v):
                out[f'{key}[{i}]'] = x
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = v
    return out


def median_runs(runs: list[dict]) -> dict:
    """Median of every numeric metric over repeated runs (keys flattened with dots)."""
    flat = [_flatten(r) for r in runs]
    keys = []
    for f in flat:
        keys.extend(k for k in f if k not in keys)
    out = {}
    for k in keys:
        vals = [f[k] for f in flat if f.get(k) is not None]
        out[k] = statistics.median(vals) if vals else None
    return out


SUMMARY_KEYS = [
    ('chats_failed', 'failed'), ('tokens_delivered', 'tok'), ('lost', 'lost'), ('duplicated', 'dup'), ('reordered', 'reord'),
    ('latency_ms.p50', 'lat50ms'), ('latency_ms.p99', 'lat99ms'), ('latency_ms.max', 'latmax'),
    ('ttft_overhead_ms.p50', 'ttftOv'), ('tokens_per_s', 'tok/s'), ('cpu_s_per_1k_tokens', 'cpu/1k'),
    ('cpu_s_per_1k_tokens_net', 'net/1k'),
    ('payload_bytes_per_1k', 'B/1k'), ('wire_bytes_per_1k', 'wireB/1k'),
]


def summary_line(label: str, flat: dict) -> str:
    parts = [label]
    for key, short in SUMMARY_KEYS:
        v = flat.get(key)
        if isinstance(v, float):
            v = f'{v:.4g}'
        parts.append(f'{short}={v}')
    return ' '.join(parts)


# ------------------------------------------------------------------ run harness

def parse_points(spec: str) -> list[tuple[int, int, float]]:
    """'1x1000x50,10x1000x0' -> [(C chats, N tokens, R tokens/s), ...]."""
    pts = []
    for p in spec.split(','):
        c, n, r = p.lower().strip().split('x')
        pts.append((int(c), int(n), float(r)))
    return pts


def port_of(url: str) -> int:
    rest = url.split('://', 1)[-1].split('/', 1)[0]
    return int(rest.rsplit(':', 1)[1]) if ':' in rest else (443 if url.startswith(('https', 'wss')) else 80)


def resolve_pids(spec: str, port: int) -> list[int]:
    """Comma list of root PIDs, or else the process listening on `port` ([] if unknown)."""
    if spec:
        return [int(p) for p in spec.split(',') if p.strip()]
    pid = pid_listening_on(port)
    return [pid] if pid else []


class CpuSampler:
    """CPU seconds used by the product, the upstream and this client between start() and stop().

    measure_idle() samples the product's idle CPU rate (CPU-s per s: periodic tasks, socket
    pings of the connected clients); stop() then also reports server_idle_s, that rate
    times the window, which analyze_run() subtracts for cpu_s_per_1k_tokens_net."""

    def __init__(self, server_pids: list[int], upstream_pids: list[int], service_pids: list[int] = ()):
        self.server_pids, self.upstream_pids = server_pids, upstream_pids
        # optional shared back-ends (Redis, PostgreSQL): reported apart as services_s, not in server_s
        self.service_pids = list(service_pids)
        self.t0 = None
        self.idle_rate = None

    def _now(self):
        return (tree_cpu_seconds(self.server_pids), tree_cpu_seconds(self.upstream_pids), sum(os.times()[:2]),
                now_ns(), tree_cpu_seconds(self.service_pids), [tree_cpu_seconds([pid]) for pid in self.server_pids])

    async def measure_idle(self, seconds: float) -> float | None:
        import asyncio
        if seconds <= 0:
            return None
        a = self._now()
        await asyncio.sleep(seconds)
        b = self._now()
        self.idle_rate = (b[0] - a[0]) / ((b[3] - a[3]) / 1e9)
        self.service_idle_rate = (b[4] - a[4]) / ((b[3] - a[3]) / 1e9)
        return self.idle_rate

    def start(self) -> None:
        self.t0 = self._now()

    def stop(self) -> dict:
        t1 = self._now()
        out = {'server_s': t1[0] - self.t0[0], 'upstream_s': t1[1] - self.t0[1], 'client_s': t1[2] - self.t0[2]}
        if len(self.server_pids) > 1:  # which process of the product spent it (web, worker, …)
            names = [process_name(pid) for pid in self.server_pids]
            out['server_by_process'] = {
                (f'{name}#{names[:i].count(name) + 1}' if names.count(name) > 1 else name): round(b - a, 3)
                for i, (name, a, b) in enumerate(zip(names, self.t0[5], t1[5], strict=True))}
        if self.idle_rate is not None:
            out['server_idle_s'] = self.idle_rate * (t1[3] - self.t0[3]) / 1e9
        if self.service_pids:
            out['services_s'] = t1[4] - self.t0[4]
            if self.idle_rate is not None:
                out['services_idle_s'] = self.service_idle_rate * (t1[3] - self.t0[3]) / 1e9
        return out


async def run_matrix(points, repeat: int, one_run, product: str, label: str, out_path: str,
                     version: str | None = None, pause: float = 1.0, cpu: CpuSampler | None = None,
                     idle_s: float = 0.0) -> list[dict]:
    """Run every (C, N, R) point `repeat` times via `await one_run(c, n, r, k)`; print one
    line per run and the median per point; append run and median JSON lines to out_path.
    Before each point, `cpu.measure_idle(idle_s)` samples the product's idle CPU rate."""
    import asyncio
    medians = []
    out = open(out_path, 'a') if out_path else None
    try:
        for c, n, r in points:
            if cpu is not None and idle_s > 0:
                rate = await cpu.measure_idle(idle_s)
                print(f'idle CPU of the product before C={c} N={n} R={r:g}: {rate:.4f} CPU-s/s', flush=True)
            runs = []
            for k in range(1, repeat + 1):
                res = await one_run(c, n, r, k)
                res['version'] = version
                runs.append(res)
                print(summary_line(f'[{label}] C={c} N={n} R={r:g} run{k}', median_runs([res])), flush=True)
                if res.get('errors'):
                    print('  errors:', res['errors'], flush=True)
                if res.get('upstream_missing'):
                    print(f"  warning: {res['upstream_missing']} chats have no upstream record; is --upstream-log "
                          'the file the running upstream.py writes?', flush=True)
                if out:
                    out.write(json.dumps(res) + '\n')
                    out.flush()
                await asyncio.sleep(pause)
            med = median_runs(runs)
            print(summary_line(f'[{label}] C={c} N={n} R={r:g} MEDIAN', med), flush=True)
            rec = {'kind': 'median', 'product': product, 'label': label, 'c': c, 'n': n, 'r': r,
                   'repeats': len(runs), 'version': version, 'median': med}
            medians.append(rec)
            if out:
                out.write(json.dumps(rec) + '\n')
                out.flush()
    finally:
        if out:
            out.close()
    return medians
