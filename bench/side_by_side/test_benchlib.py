"""Checks of the metric code on synthetic traces: `python test_benchlib.py` or pytest."""

import benchlib as bl


def tok(i):
    return f't{i:05d} '


def upstream(tag, n, t0=1_000_000_000, step=1_000_000):
    return {'tag': tag, 'stream': True, 't_req_ns': t0 - 5_000_000, 'emit_ns': [t0 + i * step for i in range(n)]}


def test_deltas_split_markers_and_latency():
    n = 50
    up = upstream('a', n)
    tr = bl.ChatTrace('a', n, t_send_ns=up['t_req_ns'] - 1_000_000)
    for i in range(n):  # each marker split over two frames; complete 2 ms after its emit
        tr.frames.append(bl.Frame(up['emit_ns'][i] + 500_000, 10, ('delta', tok(i)[:3])))
        tr.frames.append(bl.Frame(up['emit_ns'][i] + 2_000_000, 10, ('delta', tok(i)[3:])))
    tr.frames.append(bl.Frame(tr.frames[-1].t_ns + 1, 10, ('done', None)))
    res = bl.analyze_run([tr], [up], {'server_s': 0.5}, {})
    assert (res['lost'], res['duplicated'], res['reordered']) == (0, 0, 0)
    assert res['tokens_delivered'] == n
    assert res['latency_ms']['p50'] == res['latency_ms']['max'] == 2.0
    assert res['ttft_overhead_ms']['p50'] == 3.0  # 1 ms before the upstream got it + 2 ms delivery
    assert res['cpu_s_per_1k_tokens'] == 10.0


def test_loss_duplicate_reorder_and_failed_chat():
    n = 6
    up = upstream('b', n)
    tr = bl.ChatTrace('b', n, t_send_ns=1)
    for i in (0, 1, 3, 2, 3, 5):  # 4 lost, 3 duplicated, one step backwards
        tr.frames.append(bl.Frame(up['emit_ns'][i] + 1, 7, ('delta', tok(i))))
    tr.frames.append(bl.Frame(up['emit_ns'][-1] + 2, 7, ('done', None)))
    failed = bl.ChatTrace('c', n, t_send_ns=1, error='400 database is locked')
    res = bl.analyze_run([tr, failed], [up], {}, {})
    assert (res['lost'], res['duplicated'], res['reordered']) == (1, 1, 1)
    assert res['chats_failed'] == 1 and res['missing_in_failed_chats'] == n


def test_full_snapshots_show_quadratic_bytes():
    n = 100
    up = upstream('d', n)
    tr = bl.ChatTrace('d', n, t_send_ns=1)
    for i in range(n):
        snap = ''.join(tok(k) for k in range(i + 1))
        tr.frames.append(bl.Frame(up['emit_ns'][i] + 1, len(snap) + 50, ('full', snap)))
    res = bl.analyze_run([tr], [up], {}, {})
    q = res['payload_bytes_per_1k_by_quintile']
    assert res['lost'] == 0 and res['duplicated'] == 0
    assert q[4] > 4 * q[0]  # later fifths cost more per token when the whole text is re-sent


def test_final_snapshot_repair_is_reported():
    n = 4
    up = upstream('e', n)
    tr = bl.ChatTrace('e', n, t_send_ns=1)
    for i in (0, 1, 3):
        tr.frames.append(bl.Frame(up['emit_ns'][i] + 1, 7, ('delta', tok(i))))
    tr.frames.append(bl.Frame(up['emit_ns'][-1] + 9, 40, ('done', ''.join(tok(i) for i in range(n)).strip())))
    a = bl.analyze_chat(tr, up)
    assert a['lost'] == 1 and a['only_in_final_snapshot'] == 1 and a['final_matches_stream'] is False
    assert a['delivered'] == n


if __name__ == '__main__':
    for name, fn in list(globals().items()):
        if name.startswith('test_'):
            fn()
            print('ok', name)
