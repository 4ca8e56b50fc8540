/** The latency command's command line and report (src/latencyText.ts). */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { codePoint, latencyArgs, parseLatencyOutput, renderLatency } from '../src/latencyText';

test('the CLI gets FILE:LINE code points, --json, and the PNG when asked', () => {
    assert.equal(codePoint('/ws/svc.c', 41), '/ws/svc.c:42');
    assert.deepEqual(latencyArgs('/b', 'handle', '/ws/svc.c:42', '/tmp/h.png'),
        ['latency', '/b', '--from', 'handle', '--to', '/ws/svc.c:42', '--json', '--png', '/tmp/h.png']);
    assert.deepEqual(latencyArgs('/b', 'a', 'b').slice(-1), ['--json']);
});

test('the summary is parsed before the histogram line and rendered as a table', () => {
    const stats = { min: 900, p50: 1500, p90: 2_500_000, p99: 3e6, max: 3e6, mean: 1e6 };
    const out = JSON.stringify({ from: 'handle', to: 'checksum', count: 12, threads: [7],
        ns: stats, cycles: stats }, null, 1) + '\nhistogram: /tmp/h.png\n';
    const summary = parseLatencyOutput(out);
    assert.equal(summary.count, 12);
    const text = renderLatency(summary, '/b');
    assert.ok(text.includes('12 interval(s) on 1 thread(s)'));
    assert.ok(text.includes('| P50 | 1.5 µs | 1500 |'));
    assert.ok(text.includes('| P90 | 2.50 ms | 2.5M |'));
    assert.throws(() => parseLatencyOutput('nothing'), /no summary/);
});
