#!/usr/bin/env python3
"""Print the median records of a results JSONL file (owui_bench.py / ours_bench.py --out)
as a Markdown table, one row per (product, label, C, N, R); the last record of each wins.

  python summarize.py /tmp/owui-bench/results.jsonl [--label default]
"""

import argparse
import json

COLS = [
    ('C', 'c'), ('N', 'n'), ('R', 'r'),
    ('failed', 'chats_failed'), ('lost/dup/reord', None),
    ('lat p50 ms', 'latency_ms.p50'), ('lat p99 ms', 'latency_ms.p99'), ('lat max ms', 'latency_ms.max'),
    ('TTFT ovh ms', 'ttft_overhead_ms.p50'), ('tok/s', 'tokens_per_s'),
    ('CPU s/1k tok', 'cpu_s_per_1k_tokens'), ('B/1k tok', 'payload_bytes_per_1k'),
    ('wire B/1k', 'wire_bytes_per_1k'),
]


def fmt(v):
    if v is None:
        return '–'
    if isinstance(v, float):
        if v.is_integer() and abs(v) >= 100:
            return f'{int(v):,}'
        return f'{v:.3g}' if abs(v) < 100 else f'{v:,.0f}'
    return str(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('path')
    ap.add_argument('--label', default=None)
    ap.add_argument('--quintiles', action='store_true', help='add payload bytes/1k per fifth of the answer')
    args = ap.parse_args()
    rows = {}
    for line in open(args.path):
        rec = json.loads(line)
        if rec.get('kind') != 'median' or (args.label and rec['label'] != args.label):
            continue
        rows[(rec['product'], rec['label'], rec['c'], rec['n'], rec['r'])] = rec
    head = ['product', 'label'] + [c for c, _ in COLS] + (['B/1k by fifth'] if args.quintiles else [])
    print('| ' + ' | '.join(head) + ' |')
    print('|' + '---|' * len(head))
    for (product, label, *_), rec in rows.items():
        m = rec['median']
        cells = [product, label]
        for _name, key in COLS:
            if key is None:
                cells.append('/'.join(fmt(m.get(k)) for k in ('lost', 'duplicated', 'reordered')))
            elif key in ('c', 'n', 'r'):
                cells.append(fmt(rec[key]))
            else:
                cells.append(fmt(m.get(key)))
        if args.quintiles:
            cells.append(' '.join(fmt(m.get(f'payload_bytes_per_1k_by_quintile[{i}]')) for i in range(5)))
        print('| ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main()
